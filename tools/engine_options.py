#!/usr/bin/env python3
"""Print the option table of an engine's wheel (the extractor `invoke engines.learn` runs
inside an image: sparkrack/engines/option_extract.py).

    pip download --no-deps sglang==0.5.22 -d /tmp/wheels
    python tools/engine_options.py /tmp/wheels/sglang-0.5.22-*.whl \
        > sparkrack/engines/options/sglang-0.5.22.txt
"""

import sys

from sparkrack.engines.option_extract import main

if __name__ == "__main__":
    sys.exit(main())
