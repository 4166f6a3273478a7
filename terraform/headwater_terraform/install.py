"""Put the provider into a Terraform filesystem mirror, for offline ``terraform init``.

``python -m headwater_terraform.install --mirror DIR [--cli-config FILE]`` writes the
unpacked mirror layout Terraform reads::

    DIR/headwater.io/headwater/headwater/0.1.0/linux_amd64/terraform-provider-headwater_v0.1.0

The executable is a small launcher that runs the provider of a Python environment: the
interpreter ``HEADWATER_PYTHON`` names, else the first ``python3`` on ``PATH`` (an activated
virtualenv). Terraform pins its hash in ``.terraform.lock.hcl``, which teams commit, so the
launcher's text is the same on every machine: it names no path. (It once held the absolute
interpreter path, and a teammate's or CI's install broke the committed lock file.)
With ``--cli-config`` it also writes a CLI configuration (``TF_CLI_CONFIG_FILE``) whose
``provider_installation`` uses the mirror for ``headwater.io/*/*`` and nothing else.
"""

from __future__ import annotations

import argparse
import platform
import shlex
import shutil
import sys
from pathlib import Path

from headwater_terraform import (
    PROVIDER_HOST,
    PROVIDER_NAMESPACE,
    PROVIDER_SOURCE,
    PROVIDER_TYPE,
    PROVIDER_VERSION,
)

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def terraform_platform() -> str:
    """Terraform's name for this machine, e.g. ``linux_amd64``."""
    system = platform.system().lower()
    machine = platform.machine().lower()
    return f"{system}_{_ARCH.get(machine, machine)}"


LAUNCHER = (
    "#!/bin/sh\n"
    "# terraform-provider-headwater: the provider of the Python environment HEADWATER_PYTHON\n"
    "# names, else of the first python3 on PATH. No path in here: the lock file pins this text.\n"
    'exec "${HEADWATER_PYTHON:-python3}" -m headwater_terraform.main "$@"\n'
)


def python_hint(python: str) -> str:
    """What to export so Terraform's launcher finds ``python`` (empty when PATH does)."""
    found = shutil.which("python3")
    if found and Path(found).resolve() == Path(python).resolve():
        return ""
    return (
        "Terraform starts the provider with the first python3 on PATH; for this one: "
        f"export HEADWATER_PYTHON={shlex.quote(python)}"
    )


def install_provider(mirror: str | Path, *, version: str = PROVIDER_VERSION) -> Path:
    """Write the provider into ``mirror`` (created if missing); returns the executable."""
    target = (
        Path(mirror)
        / PROVIDER_HOST
        / PROVIDER_NAMESPACE
        / PROVIDER_TYPE
        / version
        / terraform_platform()
    )
    target.mkdir(parents=True, exist_ok=True)
    executable = target / f"terraform-provider-{PROVIDER_TYPE}_v{version}"
    text = LAUNCHER
    if not executable.exists() or executable.read_text() != text:
        executable.write_text(text)
    executable.chmod(0o755)
    return executable


def cli_config(mirror: str | Path) -> str:
    """A Terraform CLI configuration that installs ``headwater.io/*/*`` from ``mirror``."""
    path = str(Path(mirror).resolve())
    return (
        "provider_installation {\n"
        "  filesystem_mirror {\n"
        f"    path    = {_hcl_string(path)}\n"
        f'    include = ["{PROVIDER_HOST}/*/*"]\n'
        "  }\n"
        "  direct {\n"
        f'    exclude = ["{PROVIDER_HOST}/*/*"]\n'
        "  }\n"
        "}\n"
    )


def _hcl_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m headwater_terraform.install",
        description=f"Install the {PROVIDER_SOURCE} provider into a filesystem mirror.",
    )
    parser.add_argument("--mirror", required=True, help="the mirror directory (created)")
    parser.add_argument("--version", default=PROVIDER_VERSION, help="version to install as")
    parser.add_argument("--cli-config", help="also write a Terraform CLI config file here")
    args = parser.parse_args(argv)
    executable = install_provider(args.mirror, version=args.version)
    print(f"installed {PROVIDER_SOURCE} {args.version}: {executable}")
    hint = python_hint(sys.executable)
    if hint:
        print(hint)
    config = cli_config(args.mirror)
    if args.cli_config:
        Path(args.cli_config).write_text(config)
        print(f"wrote {args.cli_config}; export TF_CLI_CONFIG_FILE={args.cli_config}")
    else:
        print("Add this to your Terraform CLI configuration (TF_CLI_CONFIG_FILE):\n")
        print(config, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
