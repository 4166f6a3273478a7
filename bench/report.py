"""Print the results as a rich table and write them as JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from results import Measure
from rich.console import Console
from rich.table import Table

# Wide enough for every column on one line even when stdout is a pipe (rich would use 80).
MIN_WIDTH = 150


def console() -> Console:
    width = None if os.isatty(1) else max(MIN_WIDTH, int(os.environ.get("COLUMNS", "0") or 0))
    return Console(width=width)


def fmt_value(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:,.1f}"
    return f"{value:,.2f}"


def fmt_ratio(ratio: float | None) -> str:
    """The ratio as printed; the smoke test looks for exactly this text."""
    return "n/a" if ratio is None else f"{ratio:.3f}x"


def render(measures: list[Measure], machine: dict[str, str], out: Console | None = None) -> None:
    out = out or console()
    out.print(
        f"[bold]Headwater vs nats-server[/bold]  "
        f"({machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, "
        f"{machine.get('mode', '')} run)"
    )
    table = Table(show_lines=False)
    table.add_column("scenario", no_wrap=True)
    table.add_column("load", no_wrap=True)
    table.add_column("metric", no_wrap=True)
    table.add_column("headwater", justify="right", no_wrap=True)
    table.add_column("nats-server", justify="right", no_wrap=True)
    table.add_column("ratio hw/nats", justify="right", no_wrap=True)
    table.add_column("target", no_wrap=True)
    table.add_column("note", overflow="fold")
    for m in measures:
        met = m.target_met
        mark = "" if met is None else (" [green]met[/green]" if met else " [red]missed[/red]")
        table.add_row(
            m.scenario,
            m.load,
            m.metric,
            fmt_value(m.headwater),
            fmt_value(m.nats),
            fmt_ratio(m.ratio),
            (m.target.text if m.target else "-") + mark,
            m.note,
        )
    out.print(table)
    for key in ("python", "headwater", "nats_server", "nats_py", "nats_go"):
        if key in machine:
            out.print(f"  {key}: {machine[key]}")


def write_json(path: Path, measures: list[Measure], machine: dict[str, str]) -> None:
    data: dict[str, Any] = {"machine": machine, "measures": [m.to_json() for m in measures]}
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
