"""``python -m benchmarks``: see docs/performance.md and ``--help``."""

import sys

from .run import main

sys.exit(main())
