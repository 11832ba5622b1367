"""``python -m loghandler``: the command line.

Only run as a script: importing this module (mkdocstrings and other tools that walk a package
do) must not parse their own command line as ours.
"""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
