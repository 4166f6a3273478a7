"""How results reach the terminal: the server's JSON with ``--json``, rich tables otherwise.

Consoles are built per call (not at import) so they write to whatever ``sys.stdout`` is now,
which is what ``typer.testing.CliRunner`` swaps in.

Tables and panels never cut a word (a stream name, a subject): without a terminal (CI) rich
assumes 80 columns, and what does not fit side by side prints as a list instead
(:class:`headwater.control.render.FitTable`, :class:`FitPanel`).
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from headwater.control import units
from headwater.control.render import FitTable

Rows = Sequence[tuple[str, object]]

UNLIMITED = "unlimited"


def console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def error_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def stderr_is_tty() -> bool:
    """Progress bars go to stderr, and only when a person watches it."""
    return sys.stderr.isatty()


def emit_json(value: object) -> None:
    """Pretty JSON on stdout; the ``type`` envelope field is noise for a reader and dropped."""
    if isinstance(value, dict):
        value = {key: item for key, item in value.items() if key != "type"}
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False) + "\n")


def emit_json_line(value: object) -> None:
    """One compact JSON object per line, for streams of messages (``sub``, ``watch``)."""
    sys.stdout.write(json.dumps(value, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def say(text: str) -> None:
    console().print(text)


def note(text: str) -> None:
    """Progress chatter for humans goes to stderr so stdout stays clean for pipes."""
    error_console().print(text)


def panel(title: str, sections: Iterable[tuple[str, Rows]]) -> None:
    """A titled panel of key/value sections, as ``nats stream info`` prints them."""
    console().print(FitPanel(title, sections))


class FitPanel:
    """``panel``'s renderable: a bordered panel when its title and every word of its values
    fit the console, else the same lines without the border (nothing is cut)."""

    def __init__(self, title: str, sections: Iterable[tuple[str, Rows]]) -> None:
        self.title = Text.from_markup(title)
        self.sections = [
            (heading, [(f"{key}:", Text(str(value))) for key, value in rows])
            for heading, rows in sections
            if rows
        ]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        keys = [key for _, rows in self.sections for key, _ in rows]
        headings = [heading for heading, _ in self.sections]
        key_width = max(map(cell_len, keys + headings), default=0)
        lines = [line for _, rows in self.sections for _, v in rows for line in v.plain.split("\n")]
        longest_word = max((cell_len(w) for line in lines for w in line.split()), default=0)
        longest_line = max(map(cell_len, lines), default=0)
        # Border and padding take two columns on each side; two spaces separate the columns.
        frame = 4 + key_width + 2
        # The title sits in the top border between "╭─ " and " ─╮".
        title_room = self.title.cell_len + 6
        if max(frame + longest_word, title_room) > options.max_width:
            yield from self._as_list()
            return
        width = min(max(frame + longest_line, title_room), options.max_width)
        grid = Table.grid(padding=(0, 2))
        grid.add_column(justify="right", style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        for number, (heading, rows) in enumerate(self.sections):
            if number:
                grid.add_row("", "")
            grid.add_row(Text(heading, style="underline"), "")
            for key, value in rows:
                grid.add_row(key, value)
        yield Panel(grid, title=self.title, title_align="left", width=width)

    def _as_list(self) -> RenderResult:
        yield self.title
        for heading, rows in self.sections:
            yield Text(heading, style="underline")
            for key, value in rows:
                yield Text.assemble(f"  {key} ", value)


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    grid = FitTable(title, columns)
    for row in rows:
        grid.add_row(*(str(cell) for cell in row))
    console().print(grid)


# --- human formatting ----------------------------------------------------------------------
def duration(ns: int | None, zero: str = UNLIMITED) -> str:
    """Nanoseconds in the units flags and YAML accept (``1y``, ``72h``, ``1m30s``), so a value
    read here can be typed back in; ``zero`` for 0 or absent."""
    if not ns or ns < 0:
        return zero
    return units.format_duration(int(ns))


def size(value: int | None) -> str:
    """Bytes with binary units; negative means no limit."""
    if value is None or value < 0:
        return UNLIMITED
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if amount < 1024 or unit == "TiB":
            return f"{int(amount)} B" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")


def count(value: int | None) -> str:
    """A count with thousands separators; negative means no limit."""
    if value is None or value < 0:
        return UNLIMITED
    return f"{value:,}"


def data_text(data: bytes) -> tuple[str, str]:
    """A payload for JSON: (text, "utf-8") when it decodes, else (base64, "base64")."""
    try:
        return data.decode(), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode(), "base64"


def printable(data: bytes) -> str:
    """A payload for a terminal: the text, or a note on its size when it is binary."""
    text, encoding = data_text(data)
    return text if encoding == "utf-8" else f"<{len(data)} bytes of binary data>"


# --- progress --------------------------------------------------------------------------------
class _Tracker:
    """What long work reports to; a no-op when no terminal is watching."""

    def __init__(self, progress: Progress | None, task: int | None) -> None:
        self._progress = progress
        self._task = task

    def advance(self, steps: int = 1) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, steps)

    def total(self, total: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, total=total)


@contextmanager
def progress(description: str, total: int | None, enabled: bool = True) -> Iterator[_Tracker]:
    """A rich progress bar on stderr when it is a terminal; silent otherwise (pipes, tests)."""
    if not (enabled and stderr_is_tty()):
        yield _Tracker(None, None)
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        # The terminal check is ours (and can be faked in tests); rich need not repeat it.
        console=Console(stderr=True, force_terminal=True),
        transient=True,
    )
    with bar:
        yield _Tracker(bar, bar.add_task(description, total=total))
