"""``headwater-operator``: the operator's flags, then ``kopf run`` with everything else.

    headwater-operator --nats-url nats://headwater:4222 --all-namespaces \\
        --liveness http://0.0.0.0:8080/healthz --peering headwater-operator

Scope is kopf's: ``--namespace NS`` (repeatable, globs allowed) or ``--all-namespaces``;
``--standalone`` skips peering; ``--peering NAME`` elects one active replica of several (the
highest ``--priority``; without one, a priority derived from the pod's name).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import kopf
from kopf import cli

from headwater_operator.config import OperatorConfig, parse_args
from headwater_operator.handlers import build_operator


def log_priority(config: OperatorConfig, registry: kopf.OperatorRegistry) -> None:
    """Say which priority was derived, once kopf has set up logging (it does so in ``run``)."""
    message = config.priority_note()
    if not message:
        return

    def announce(logger: kopf.Logger, **_: Any) -> None:
        logger.info(message)

    kopf.on.startup(registry=registry)(announce)


def main(argv: Sequence[str] | None = None) -> int:
    config, kopf_args = parse_args(sys.argv[1:] if argv is None else argv)
    registry = kopf.get_default_registry()
    build_operator(config, registry)
    log_priority(config, registry)
    controls = cli.CLIControls(registry=registry)
    # kopf's click command group; standalone_mode=False returns instead of sys.exit.
    result = cli.main.main(
        ["run", *kopf_args], prog_name="headwater-operator", obj=controls, standalone_mode=False
    )
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
