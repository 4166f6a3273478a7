"""The Terraform provider ``headwater`` (``terraform-provider-headwater``), in Python.

It speaks tfplugin6 through the ``tf`` package and plans and applies through the
control-plane core (``headwater.control``), so a Terraform plan is the plan the CLI and the
operator would make. See docs/TERRAFORM.md.
"""

PROVIDER_HOST = "headwater.io"
PROVIDER_NAMESPACE = "headwater"
PROVIDER_TYPE = "headwater"
PROVIDER_SOURCE = f"{PROVIDER_HOST}/{PROVIDER_NAMESPACE}/{PROVIDER_TYPE}"
PROVIDER_VERSION = "0.1.0"
"""The version the mirror installs; ``required_providers`` may pin it."""
