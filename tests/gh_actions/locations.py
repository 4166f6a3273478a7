"""Where the actions and examples live, and the type of the ``act`` fixture."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from support.actions_runner import ActionRun

REPO = Path(__file__).resolve().parents[2]
ACTIONS = REPO / "gh-actions"
EXAMPLES = REPO / "examples"

RunAction = Callable[..., ActionRun]
"""``act("plan", files="jetstream", server=url)``: run gh-actions/plan in the workspace."""
