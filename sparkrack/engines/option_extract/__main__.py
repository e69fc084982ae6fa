"""`python -m sparkrack.engines.option_extract` (in an image: `python3 -m option_extract`)."""

import sys

from .cli import main

sys.exit(main())
