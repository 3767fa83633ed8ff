"""``python -m tools.bench ...``: the same as ``lsm bench ...``."""

import sys

from tools.bench import main

sys.exit(main(sys.argv[1:]))
