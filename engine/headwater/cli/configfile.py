"""``--config file.json``: a stream or consumer configuration in the server's JSON.

The file holds what ``headwater stream info NAME --json | jq .config`` prints; the whole info
object (with its ``config`` key) is accepted too, so a saved ``info`` works unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from headwater.cli.errors import CliError


def load(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        data = json.loads(text)
    except ValueError as error:
        raise CliError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise CliError(f"{path} must hold a JSON object (a configuration), not {kind}")
    inner = data.get("config")
    return dict(inner) if isinstance(inner, dict) else data
