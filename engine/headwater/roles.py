"""The console scripts, one per role, each installed by its own extra (pyproject.toml).

``pip install 'headwater[cli]'`` does not bring the server's packages, nor the operator's,
so each script imports its role first and turns a missing package into one line naming the
extra to install, instead of a traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

OUR_PACKAGES = ("headwater", "headwater_operator", "headwater_terraform")


def launch(module: str, extra: str, script: str) -> int:
    """Run ``module.main()``; exit 1 with an install hint when the role's extra is missing."""
    try:
        main: Callable[[], int | None] = importlib.import_module(module).main
        # main() too: some roles import their heavy parts only when they start serving.
        return int(main() or 0)
    except ModuleNotFoundError as missing:
        if not missing.name or missing.name.split(".")[0] in OUR_PACKAGES:
            raise
        sys.stderr.write(
            f"Error: {script} needs the {extra!r} extra ({missing.name} is not installed): "
            f"pip install 'headwater[{extra}]'\n"
        )
        return 1


def server() -> int:
    return launch("headwater.server.main", "server", "headwater-server")


def cli() -> int:
    return launch("headwater.cli.app", "cli", "headwater")


def operator_main() -> int:
    return launch("headwater_operator.main", "operator", "headwater-operator")


def terraform_provider() -> int:
    return launch("headwater_terraform.main", "terraform", "terraform-provider-headwater")
