"""`python -m sessionsearch`: the `sessionsearch` command (sessionsearch/cli.py)."""

import sys

from .cli import main

sys.exit(main())
