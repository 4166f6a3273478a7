"""``python -m headwater_operator``: the same as the ``headwater-operator`` command."""

import sys

from headwater_operator.main import main

sys.exit(main())
