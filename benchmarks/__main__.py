"""``python -m benchmarks``: see README "Performance" and ``--help``."""

import sys

from .run import main

sys.exit(main())
