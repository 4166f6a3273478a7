"""Plans and apply results for people (rich tables, markdown) and for programs (JSON).

Markdown is what ``plan --markdown`` writes for ``$GITHUB_STEP_SUMMARY`` and pull-request
comments. Values show in human units (``1y``, ``10GiB``); JSON keeps the server's numbers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.table import Table

from headwater.control.apply import ApplyReport, Status
from headwater.control.plan import Action, Change, FieldChange, Plan

_ACTION_STYLE = {
    Action.CREATE: "green",
    Action.UPDATE: "yellow",
    Action.REPLACE: "bold red",
    Action.DELETE: "red",
    Action.NOOP: "dim",
}
SYMBOL = {
    Action.CREATE: "+",
    Action.UPDATE: "~",
    Action.REPLACE: "-/+",
    Action.DELETE: "-",
    Action.NOOP: " ",
}
_STATUS_STYLE = {
    Status.APPLIED: "green",
    Status.UNCHANGED: "dim",
    Status.SKIPPED: "yellow",
    Status.FAILED: "bold red",
}


def value_text(change: Change, item: FieldChange, value: Any) -> str:
    if value is None:
        return "(none)"
    if change.spec is not None:
        value = change.spec.display(item.path, value)
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value, sort_keys=True, default=str)


def field_lines(change: Change) -> list[str]:
    return [
        f"{item.path}: {value_text(change, item, item.before)} -> "
        f"{value_text(change, item, item.after)}"
        for item in change.fields
    ]


def notes(change: Change) -> list[str]:
    lines = list(change.reasons)
    if change.destructive and change.action is not Action.DELETE:
        lines.append("destructive: deletes and re-creates")
    if change.refused:
        lines.append(f"REFUSED: {change.refused}")
    if change.skipped:
        lines.append(f"skipped: {change.skipped}")
    return lines


def summary_line(plan: Plan) -> str:
    counts = plan.counts()
    parts = [f"{counts[a.value]} to {a.value}" for a in Action if a is not Action.NOOP]
    text = "Plan: " + ", ".join(parts) + f", {counts['noop']} unchanged."
    if plan.refusals:
        text += f" {len(plan.refusals)} refused."
    return text


def owner_line(plan: Plan) -> str:
    prune = "; prune deletes only what it manages" if plan.prune else ""
    return f"Owner: {plan.owner} (headwater.io/managed-by){prune}."


def plan_table(plan: Plan, *, show_noop: bool = False) -> Table:
    table = Table(title="Plan", show_lines=True)
    table.add_column("", no_wrap=True)
    table.add_column("Action", no_wrap=True)
    table.add_column("Resource")
    table.add_column("Changes")
    table.add_column("Notes")
    for change in _visible(plan.ordered(), show_noop):
        style = _ACTION_STYLE[change.action]
        table.add_row(
            SYMBOL[change.action],
            f"[{style}]{change.action.value}[/{style}]",
            str(change.key),
            "\n".join(field_lines(change)),
            "\n".join(notes(change)),
        )
    return table


def print_plan(plan: Plan, console: Console, *, show_noop: bool = False) -> None:
    if any(change.action is not Action.NOOP for change in plan.changes) or show_noop:
        console.print(plan_table(plan, show_noop=show_noop))
    console.print(owner_line(plan), highlight=False, markup=False)
    console.print(summary_line(plan))
    if not plan.has_changes:
        console.print("No changes. The server matches the documents.")


def plan_markdown(plan: Plan) -> str:
    """A markdown plan fit for $GITHUB_STEP_SUMMARY and a pull-request comment."""
    lines = ["## Headwater plan", "", owner_line(plan), "", summary_line(plan), ""]
    visible = list(_visible(plan.ordered(), False))
    if not visible:
        lines.append("No changes. The server matches the documents.")
        return "\n".join(lines) + "\n"
    lines += ["| | Action | Resource | Changes | Notes |", "|---|---|---|---|---|"]
    for change in visible:
        changes = "<br>".join(_md(line) for line in field_lines(change))
        note = "<br>".join(_md(line) for line in notes(change))
        lines.append(
            f"| `{SYMBOL[change.action]}` | **{change.action.value}** | `{change.key}` "
            f"| {changes} | {note} |"
        )
    if plan.refusals:
        lines += ["", "> [!WARNING]", "> Refused changes: apply will not run until allowed."]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _visible(changes: Iterable[Change], show_noop: bool) -> Iterable[Change]:
    return (c for c in changes if show_noop or c.action is not Action.NOOP)


def plan_json(plan: Plan) -> str:
    return json.dumps(plan.to_dict(), indent=2, sort_keys=False, default=str)


def report_table(report: ApplyReport) -> Table:
    table = Table(title="Apply", show_lines=False)
    table.add_column("Resource")
    table.add_column("Action", no_wrap=True)
    table.add_column("Result", no_wrap=True)
    table.add_column("Message")
    for result in report.results:
        if result.status is Status.UNCHANGED:
            continue
        style = _STATUS_STYLE[result.status]
        table.add_row(
            str(result.change.key),
            result.change.action.value,
            f"[{style}]{result.status.value}[/{style}]",
            result.message,
        )
    return table


def report_summary(report: ApplyReport) -> str:
    counts = report.to_dict()["summary"]
    return (
        f"Apply: {counts['applied']} applied, {counts['unchanged']} unchanged, "
        f"{counts['skipped']} skipped, {counts['failed']} failed."
    )


def report_markdown(report: ApplyReport) -> str:
    lines = ["## Headwater apply", "", report_summary(report), ""]
    rows = [r for r in report.results if r.status is not Status.UNCHANGED]
    if rows:
        lines += ["| Resource | Action | Result | Message |", "|---|---|---|---|"]
        for result in rows:
            lines.append(
                f"| `{result.change.key}` | {result.change.action.value} "
                f"| **{result.status.value}** | {_md(result.message)} |"
            )
    return "\n".join(lines) + "\n"


def report_json(report: ApplyReport) -> str:
    return json.dumps(report.to_dict(), indent=2, default=str)
