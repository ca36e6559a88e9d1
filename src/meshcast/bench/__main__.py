"""``python -m meshcast.bench`` runs ``meshcast bench``."""

import sys

from .cli import main

sys.exit(main())
