"""Plans and apply results for people (rich tables, markdown) and for programs (JSON).

Markdown is what ``plan --markdown`` writes for ``$GITHUB_STEP_SUMMARY`` and pull-request
comments. Values show in human units (``1y``, ``10GiB``); JSON keeps the server's numbers.

Tables are :class:`FitTable`: CI logs have no terminal, so rich falls back to 80 columns, and a
plain rich table cuts long resource keys (``Consumer/ORDERS/D…``). A FitTable never breaks a
word: it is a table when every word fits in its column, else a list (the CLI's tables too).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

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


Cell = str | Text


class FitTable:
    """A table that never cuts a word: resource keys, names, subjects and metadata keys stay
    whole and copyable, however narrow the console.

    Column widths are chosen here, not by rich (whose shrinking cuts the widest column even
    when another has room to spare): every column gets at least its longest word, then the
    room left goes to the columns whose lines are longest. When even the longest words do not
    fit side by side, the rows print as a list: the first ``lead`` cells on one line, then one
    ``Header: value`` line per other cell.
    """

    def __init__(self, title: str, headers: Iterable[str], *, lead: int = 1, lines: bool = False):
        self.title = title
        self.headers = list(headers)
        self.lead = lead
        self.show_lines = lines
        self.rows: list[list[Text]] = []

    def add_row(self, *cells: Cell) -> None:
        """Plain strings are text, never markup: names may hold ``[``."""
        self.rows.append([cell if isinstance(cell, Text) else Text(cell) for cell in cells])

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text(self.title, style="table.title", end="\n")
        # Each column is padded by one space either side and every column has a border to
        # its left, plus one on the right edge.
        room = options.max_width - len(self.headers) - 1
        widths = fit_widths([self._column(i) for i in range(len(self.headers))], room)
        if widths is None:
            yield from self._as_list()
            return
        table = Table(show_lines=self.show_lines)
        for header, width in zip(self.headers, widths, strict=True):
            # fold only as a last resort: the width already holds the column's longest word
            table.add_column(header, width=width - 2, overflow="fold")
        for row in self.rows:
            table.add_row(*row)
        yield table

    def _column(self, index: int) -> tuple[int, int]:
        """(longest word, longest line) of a column, header included, padding added."""
        texts = [Text(self.headers[index])] + [row[index] for row in self.rows]
        lines = [line for text in texts for line in text.plain.splitlines()]
        words = [len_ for line in lines for len_ in map(cell_len, line.split())]
        return max(words, default=1) + 2, max(map(cell_len, lines), default=1) + 2

    def _as_list(self) -> RenderResult:
        for number, row in enumerate(self.rows):
            if number:
                yield Text("")
            yield Text(" ").join(cell for cell in row[: self.lead] if cell.plain)
            for header, cell in zip(self.headers[self.lead :], row[self.lead :], strict=True):
                if not cell.plain:
                    continue
                lines = cell.split("\n")
                if len(lines) == 1:
                    yield Text.assemble(f"  {header}: ", cell)
                    continue
                yield Text(f"  {header}:")
                for line in lines:
                    yield Text.assemble("    ", line)


def fit_widths(columns: list[tuple[int, int]], room: int) -> list[int] | None:
    """Widths for columns given as (narrowest, widest) that sum to at most ``room``: each at
    least its narrowest, the spare room shared in proportion to what each still wants.
    None when even the narrowest widths do not fit."""
    narrow = [low for low, _ in columns]
    wide = [max(low, high) for low, high in columns]
    if sum(wide) <= room:
        return wide
    if sum(narrow) > room:
        return None
    spare = room - sum(narrow)
    wants = [high - low for low, high in zip(narrow, wide, strict=True)]
    total = sum(wants)
    widths = [low + spare * want // total for low, want in zip(narrow, wants, strict=True)]
    # Rounding down leaves a few columns' worth; hand it to the hungriest columns.
    hungriest = sorted(range(len(widths)), key=lambda i: widths[i] - wide[i])
    for index in hungriest[: room - sum(widths)]:
        widths[index] += 1
    return widths


def plan_table(plan: Plan, *, show_noop: bool = False) -> FitTable:
    table = FitTable("Plan", ("", "Action", "Resource", "Changes", "Notes"), lead=3, lines=True)
    for change in _visible(plan.ordered(), show_noop):
        table.add_row(
            SYMBOL[change.action],
            Text(change.action.value, style=_ACTION_STYLE[change.action]),
            str(change.key),
            "\n".join(field_lines(change)),
            "\n".join(notes(change)),
        )
    return table


def print_plan(plan: Plan, console: Console, *, show_noop: bool = False) -> None:
    if any(change.action is not Action.NOOP for change in plan.changes) or show_noop:
        # soft_wrap: a list line longer than the console (a very long resource key) goes out
        # whole for the terminal to wrap, instead of being cropped at the console's width
        console.print(plan_table(plan, show_noop=show_noop), soft_wrap=True)
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


def report_table(report: ApplyReport) -> FitTable:
    table = FitTable("Apply", ("Resource", "Action", "Result", "Message"))
    for result in report.results:
        if result.status is Status.UNCHANGED:
            continue
        table.add_row(
            str(result.change.key),
            result.change.action.value,
            Text(result.status.value, style=_STATUS_STYLE[result.status]),
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
