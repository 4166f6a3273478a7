"""Who manages an asset: the provider's ``owner`` and the server's ``headwater.io/managed-by``.

The provider writes its ``owner`` (default ``terraform``; one per configuration or workspace,
e.g. ``terraform:prod``) into the marker of everything it creates or updates, and each
resource shows the live marker as its computed ``managed_by``. An asset another owner manages
is refused, never fought over; ``terraform import`` is the explicit adoption.

An adoption has to survive from the import to the apply that writes the marker, across
separate Terraform commands. It rides in the resource's private state (bytes Terraform stores
next to the state and hands back on every call, never shown): ``{"adopt": "<owner>"}`` names
the owner being taken over, so an asset that changed hands again since the import is still
refused. The apply that writes the marker clears it.
"""

from __future__ import annotations

import json

from headwater.control.models import MANAGED_BY_VALUE

DEFAULT_OWNER = "terraform"

OWNER_HELP = (
    "Who this configuration is, written into `headwater.io/managed-by` of everything it creates "
    "or updates; assets another owner manages are refused. Default `terraform`; give each "
    "configuration or workspace its own (`terraform:prod`). `HEADWATER_OWNER` is the CLI's and "
    "is not read here."
)

BEFORE_OWNERS = ""
"""``managed_by`` of state written before the attribute existed: that provider wrote the legacy
marker, so a live legacy marker on such a resource is this configuration's own."""


def owner_problem(value: object) -> str | None:
    """Why ``value`` can not be the provider's owner (None: it can)."""
    if not isinstance(value, str) or not value.strip():
        return "owner must not be empty: name this configuration, e.g. terraform:prod"
    if value == MANAGED_BY_VALUE:
        return (
            f'owner can not be the legacy marker "{MANAGED_BY_VALUE}" (written before owners '
            "had names; nobody takes it without adopting): name this configuration, "
            "e.g. terraform:prod"
        )
    return None


def adopt_hint(type_name: str, import_id: str) -> str:
    """How a Terraform configuration takes over an asset (the end of a refusal's text)."""
    address = f"{type_name}.<name>"
    return (
        f"import it into this configuration (terraform state rm {address} if it is in the "
        f"state, then terraform import {address} {import_id})"
    )


def adopting(private: bytes) -> str | None:
    """The owner an imported resource is being taken from, per its private state."""
    if not private:
        return None
    try:
        data = json.loads(private)
    except ValueError:
        return None  # another provider version's private state: nothing adopted
    adopt = data.get("adopt") if isinstance(data, dict) else None
    return adopt if isinstance(adopt, str) and adopt else None


def adopt_private(previous: str | None) -> bytes:
    """Private state recording an adoption from ``previous`` (empty: nothing to adopt)."""
    return json.dumps({"adopt": previous}).encode() if previous else b""
