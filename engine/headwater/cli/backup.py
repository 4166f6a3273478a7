"""``headwater stream backup|restore`` and ``headwater account backup|restore``.

These commands extend the ``stream`` and ``account`` apps (imported from ``cli.app``); the
work is done by :mod:`headwater.control.backup`. A rich progress bar (bytes, speed) shows on
stderr when it is a terminal.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from nats.aio.client import Client
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

from headwater.archive import ArchiveFormat
from headwater.cli import account, output, stream
from headwater.cli.context import current
from headwater.cli.errors import ApiError, CliError
from headwater.control.backup import (
    SALVAGED_KEY,
    BackupError,
    BackupResult,
    account_backups,
    backup_account,
    backup_stream,
    convert_backup,
    restore_account,
    restore_stream,
)
from headwater.verify.checks import verify_backup

__all__ = [
    "account_backup",
    "account_restore",
    "stream_backup",
    "stream_convert",
    "stream_restore",
]

Directory = Annotated[Path, typer.Argument(help="Backup directory.", show_default=False)]
# Long only, as in stream.py: -f is --file everywhere.
Force = Annotated[bool, typer.Option("--force", help="Write into a directory that is not empty.")]
Consumers = Annotated[
    bool, typer.Option("--consumers/--no-consumers", help="Include durable consumers.")
]
Check = Annotated[bool, typer.Option("--check", help="Health-check the stream first (jsck).")]
JsonOpt = Annotated[bool, typer.Option("--json", "-j", help="Print the result as JSON.")]


class Format(enum.StrEnum):
    """An archive format on the command line; ``server`` keeps what the server sent."""

    SERVER = "server"
    HEADWATER = "headwater"
    NATS = "nats"

    def archive_format(self) -> ArchiveFormat | None:
        return None if self is Format.SERVER else ArchiveFormat(self.value)


FormatOpt = Annotated[
    Format,
    typer.Option(
        "--format",
        help="Archive format: as the server sends it (stream.hwarc from Headwater, "
        "stream.tar.s2 from nats-server), or converted: nats (stream.tar.s2, which nats-server "
        "2.15 and `nats stream restore` read) or headwater (stream.hwarc).",
        case_sensitive=False,
    ),
]


@contextmanager
def _bar(description: str) -> Iterator[Callable[[int, int], None] | None]:
    """A byte progress callback drawing on stderr, or None when stderr is not a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=output.error_console(),
        transient=True,
    )
    with bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=max(total, done) or None)

        yield update


def _failed(error: BackupError) -> CliError:
    if error.err_code:
        return ApiError(error.code, error.err_code, str(error))
    return CliError(str(error))


def _result_json(result: BackupResult) -> dict[str, Any]:
    return {
        "stream": result.stream,
        "directory": str(result.directory),
        "messages": result.messages,
        "stream_bytes": result.stream_bytes,
        "archive": result.archive.name,
        "archive_bytes": result.archive_bytes,
        "seconds": round(result.seconds, 3),
    }


def _say_result(result: BackupResult) -> None:
    output.say(
        f"Backed up stream {result.stream}: {output.count(result.messages)} messages, "
        f"{output.size(result.stream_bytes)} stored, {output.size(result.archive_bytes)} "
        f"archive in {result.seconds:.2f}s to {result.directory}"
    )


@stream.app.command("backup")
def stream_backup(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Stream to back up.", show_default=False)],
    directory: Directory,
    force: Force = False,
    consumers: Consumers = True,
    check: Check = False,
    archive_format: FormatOpt = Format.SERVER,
    as_json: JsonOpt = False,
) -> None:
    """Back a stream up to DIR: backup.json (config and state) and the archive."""
    cli = current(ctx)

    async def body(nc: Client) -> BackupResult:
        with _bar(f"Backing up {name}") as progress:
            return await backup_stream(
                nc,
                name,
                directory,
                force=force,
                consumers=consumers,
                check=check,
                timeout=max(cli.timeout, 10.0),
                progress=progress,
                convert_to=archive_format.archive_format(),
            )

    try:
        result = cli.run(body)
    except BackupError as error:
        raise _failed(error) from None
    if cli.wants_json(as_json):
        output.emit_json(_result_json(result))
    else:
        _say_result(result)


@stream.app.command("restore")
def stream_restore(
    ctx: typer.Context,
    directory: Directory,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Run the backup verifier's checks first (as `headwater verify`, without "
            "Spark) and refuse a backup with any finding.",
        ),
    ] = False,
    config: Annotated[
        Path | None, typer.Option("--config", help="Stream config to use instead (JSON).")
    ] = None,
    salvage: Annotated[
        bool,
        typer.Option(
            "--salvage",
            help="Restore a damaged Headwater archive from its readable frames: the stream "
            "is marked (metadata headwater.io/salvaged) and what was lost is reported.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Restore a stream from a backup directory; its name must not be in use."""
    cli = current(ctx)
    override: dict[str, Any] | None = None
    if config is not None:
        try:
            override = json.loads(config.read_text())
        except (OSError, ValueError) as exc:
            raise CliError(f"{config}: {exc}") from None

    if verify:
        _refuse_if_findings(directory)

    async def body(nc: Client) -> dict[str, Any]:
        with _bar(f"Restoring {directory.name}") as progress:
            return await restore_stream(
                nc,
                directory,
                config=override,
                timeout=max(cli.timeout, 10.0),
                progress=progress,
                salvage=salvage,
            )

    try:
        info = cli.run(body)
    except BackupError as error:
        raise _failed(error) from None
    lost = info.get("salvage") or {}
    if lost.get("damaged"):
        # On stderr even with --json: a salvaged stream must not pass for a full restore.
        output.note(
            f"Warning: stream {info['config']['name']} was salvaged, not fully restored: "
            f"{lost['summary']}; marked with metadata {SALVAGED_KEY}"
        )
    if cli.wants_json(as_json):
        output.emit_json(info)
        return
    _say_restored(info)


def _say_restored(info: dict[str, Any]) -> None:
    state = info.get("state", {})
    output.say(
        f"Restored stream {info['config']['name']}: {output.count(state.get('messages', 0))} "
        f"messages, {output.size(state.get('bytes', 0))}, "
        f"{state.get('consumer_count', 0)} consumers"
    )


@stream.app.command("convert")
def stream_convert(
    directory: Directory,
    archive_format: Annotated[
        ArchiveFormat,
        typer.Option(
            "--format",
            help="nats: stream.tar.s2, which nats-server 2.15 and `nats stream restore` "
            "read; headwater: stream.hwarc.",
            case_sensitive=False,
        ),
    ],
) -> None:
    """Convert a backup directory's archive in place to another format (no server needed).

    Consumers with unacknowledged messages restart from their ack floor in a nats archive,
    as they do after a nats-server backup."""
    try:
        archive = convert_backup(directory, archive_format)
    except BackupError as error:
        raise _failed(error) from None
    output.say(f"{directory}: {archive.name} ({output.size(archive.stat().st_size)})")


def _refuse_if_findings(directory: Path) -> None:
    """The verifier's checks on one backup: checksums, sequences against the recorded state,
    counts, consumer state and configs. A restore of a damaged backup is refused before the
    server is contacted."""
    report = verify_backup(str(directory))
    if report.findings:
        details = "; ".join(f"{f.kind}: {f.detail}" for f in report.findings[:5])
        more = len(report.findings) - 5
        raise CliError(
            f"{directory} failed verification ({len(report.findings)} findings): {details}"
            + (f" and {more} more" if more > 0 else "")
        )


@account.app.command("backup")
def account_backup(
    ctx: typer.Context,
    directory: Directory,
    force: Force = False,
    consumers: Consumers = True,
    check: Check = False,
    archive_format: FormatOpt = Format.SERVER,
    as_json: JsonOpt = False,
) -> None:
    """Back every stream up to DIR, one subdirectory per stream."""
    cli = current(ctx)

    async def body(nc: Client) -> list[BackupResult]:
        with _bar("Backing up streams") as progress:
            return await backup_account(
                nc,
                directory,
                force=force,
                consumers=consumers,
                check=check,
                timeout=max(cli.timeout, 10.0),
                on_stream=lambda _name: progress,
                convert_to=archive_format.archive_format(),
            )

    try:
        results = cli.run(body)
    except BackupError as error:
        raise _failed(error) from None
    if cli.wants_json(as_json):
        output.emit_json({"streams": [_result_json(r) for r in results]})
        return
    for result in results:
        _say_result(result)
    output.say(f"{len(results)} streams backed up to {directory}")


@account.app.command("restore")
def account_restore(
    ctx: typer.Context,
    directory: Directory,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Run the backup verifier's checks on every backup first and refuse them all "
            "if any has a finding.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Restore every stream `account backup` wrote to DIR, in name order.

    Nothing is restored when DIR holds no backups or any of the stream names is in use. When
    one restore fails, the error names the streams restored and those not."""
    cli = current(ctx)
    wants_json = cli.wants_json(as_json)
    try:
        backups = account_backups(directory)
    except BackupError as error:
        raise _failed(error) from None
    if verify:
        for backup in backups:
            _refuse_if_findings(backup.directory)

    def restored(info: dict[str, Any]) -> None:
        if not wants_json:  # as each finishes: a long restore shows what is done
            _say_restored(info)

    async def body(nc: Client) -> list[dict[str, Any]]:
        with _bar("Restoring streams") as progress:
            return await restore_account(
                nc,
                backups,
                timeout=max(cli.timeout, 10.0),
                on_stream=lambda _name: progress,
                on_restored=restored,
            )

    try:
        infos = cli.run(body)
    except BackupError as error:
        raise _failed(error) from None
    if wants_json:
        output.emit_json({"streams": infos})
    else:
        output.say(f"{len(infos)} streams restored from {directory}")
