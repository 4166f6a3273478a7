"""The Headwater Kubernetes operator: kopf handlers over the control-plane core.

Stream, Consumer, KeyValue, ObjectStore and StreamTemplate custom resources (group
``headwater.io``, version ``v1``) are reconciled one at a time through
``headwater.control`` (plan, then apply), exactly as the CLI reconciles YAML files.
"""

GROUP = "headwater.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
