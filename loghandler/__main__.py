"""``python -m loghandler``: the command line."""

from .cli import main

raise SystemExit(main())
