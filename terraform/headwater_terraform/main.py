"""``terraform-provider-headwater``: the executable Terraform starts (or ``--dev`` for tests)."""

from __future__ import annotations

import sys

from headwater_terraform import PROVIDER_VERSION


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if "--version" in args:
        print(PROVIDER_VERSION)
        return
    # Imported here so --version stays instant and nothing prints before the handshake.
    from headwater_terraform.provider import HeadwaterProvider
    from headwater_terraform.serve import serve

    serve(HeadwaterProvider(), dev="--dev" in args)


if __name__ == "__main__":
    main()
