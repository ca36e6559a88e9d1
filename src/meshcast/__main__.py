"""``python -m meshcast <subcommand> ...``: the same as the ``meshcast`` command."""

import sys

from .cli import main

sys.exit(main())
