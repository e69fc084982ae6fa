#!/usr/bin/env python3
"""Print the option table of an engine's wheel (the extractor `invoke engines.learn` runs
inside an image: the package sparkrack/engines/option_extract).

    pip download --no-deps sglang==0.5.22 -d /tmp/wheels
    python tools/engine_options.py /tmp/wheels/sglang-0.5.22-*.whl \
        > sparkrack/engines/options/sglang-0.5.22.txt
"""

import sys

from sparkrack.engines.option_extract.cli import main

if __name__ == "__main__":
    sys.exit(main())
