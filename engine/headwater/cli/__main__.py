"""``python -m headwater.cli``: the same as the ``headwater`` console script."""

from headwater.cli.app import main

main()
