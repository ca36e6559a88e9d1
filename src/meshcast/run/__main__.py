"""``python -m meshcast.run ...``: the same as ``meshcast run ...``."""

import sys

from .cli import main

sys.exit(main())
