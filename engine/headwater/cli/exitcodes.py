"""Exit codes a pipeline can rely on (docs/CLI.md, "Output, errors, exit codes")."""

OK = 0
"""Success; for ``plan`` and ``diff``, also "no changes"."""
ERROR = 1
"""Any error: bad input, a refused change, a server error, no connection."""
CHANGES = 2
"""``plan`` and ``diff`` only: the live state differs from the desired state."""
