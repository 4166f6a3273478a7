"""Back streams up to directories and restore them, over plain NATS requests (nats-py).

A backup directory holds ``backup.json`` (``{"config": ..., "state": ...}`` as the server
reported them when the snapshot began, the layout ``nats stream backup`` writes) and the
archive, named by its format: ``stream.hwarc`` for Headwater's (docs/ARCHIVE.md),
``stream.tar.s2`` for a nats-server snapshot (the name ``nats stream backup`` gives it). The
archive's bytes are kept and restored exactly as the server sent them, whichever format; the
verification before a restore reads either (``headwater.archive.open_archive``), so a
nats-server 2.15 stream backed up here restores into Headwater. The snapshot and restore
flows are the JetStream API's (``$JS.API.STREAM.SNAPSHOT`` / ``RESTORE``, see
``headwater.server.jetstream.snapshot``); nats-py has no helper for them, so this module
speaks the raw protocol: chunks in, an empty ack per chunk, a status message at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeoutError

from headwater.archive import (
    ArchivedStream,
    ArchiveError,
    ArchiveFormat,
    ArchiveSummary,
    SalvageResult,
    archive_format,
    convert_archive,
    open_archive,
    salvage_archive,
)
from headwater.archive.layout import (
    ARCHIVE_FILE,
    ARCHIVE_FILES,
    BACKUP_FILE,
    NATS_ARCHIVE_FILE,
    archive_files,
)
from headwater.control import api

__all__ = [
    "ARCHIVE_FILE",
    "BACKUP_FILE",
    "NATS_ARCHIVE_FILE",
    "SALVAGED_KEY",
    "AccountRestoreError",
    "BackupError",
    "BackupResult",
    "Progress",
    "StreamBackup",
    "account_backups",
    "backup_account",
    "backup_stream",
    "convert_backup",
    "describe_loss",
    "prepare_directory",
    "read_backup",
    "restore_account",
    "restore_stream",
    "stream_names",
    "verify_archive",
]

_SNIFF = 10
"""Bytes :func:`archive_format` needs to tell the formats apart."""
UPLOAD_CHUNK = 128 * 1024

Progress = Callable[[int, int], None]
"""``progress(done_bytes, expected_bytes)``; ``expected`` is the stream's stored bytes, an
estimate of the archive's size before compression."""


class BackupError(Exception):
    """A backup or restore failed; ``code`` and ``err_code`` are the server's (its HTTP-like
    status and JetStream error code) when the server refused, else 0."""

    def __init__(self, message: str, err_code: int = 0, code: int = 0) -> None:
        super().__init__(message)
        self.err_code = err_code
        self.code = code


@dataclass(frozen=True)
class BackupResult:
    stream: str
    directory: Path
    archive_bytes: int
    messages: int
    """Messages in the stream when the snapshot began."""
    stream_bytes: int
    seconds: float
    archive: Path
    """The archive written: ``stream.hwarc`` or ``stream.tar.s2`` in ``directory``."""


def _api_error(reply: dict[str, Any], what: str) -> BackupError:
    err = reply.get("error") or {}
    return BackupError(
        f"{what}: {err.get('description', 'unknown error')}",
        int(err.get("err_code", 0) or 0),
        int(err.get("code", 0) or 0),
    )


async def _api(nc: Client, subject: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    try:
        msg = await nc.request(
            f"{api.prefix_of(nc)}.{subject}", json.dumps(body).encode(), timeout=timeout
        )
    except NatsTimeoutError:
        raise BackupError(f"no reply to {api.prefix_of(nc)}.{subject} within {timeout}s") from None
    reply: dict[str, Any] = json.loads(msg.data)
    return reply


def prepare_directory(directory: str | Path, force: bool) -> Path:
    """Create ``directory`` if needed; refuse a non-empty one unless ``force``."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise BackupError(f"{path} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise BackupError(f"{path} is not empty (use --force to write into it)")
    path.mkdir(parents=True, exist_ok=True)
    return path


async def stream_names(nc: Client, timeout: float = 5.0) -> list[str]:
    """Every stream of the account, through the paged STREAM.NAMES endpoint."""
    names: list[str] = []
    while True:
        reply = await _api(nc, "STREAM.NAMES", {"offset": len(names)}, timeout)
        if reply.get("error"):
            raise _api_error(reply, "listing streams failed")
        page = reply.get("streams") or []
        names.extend(page)
        if not page or len(names) >= int(reply.get("total", 0)):
            return names


async def backup_stream(
    nc: Client,
    stream: str,
    directory: str | Path,
    *,
    force: bool = False,
    consumers: bool = True,
    check: bool = False,
    chunk_size: int = 128 * 1024,
    window_size: int = 8 * 1024 * 1024,
    timeout: float = 10.0,
    progress: Progress | None = None,
    convert_to: ArchiveFormat | None = None,
) -> BackupResult:
    """Snapshot ``stream`` into ``directory``: ``backup.json`` and the archive, named by the
    format the server sent (``stream.hwarc`` from Headwater, ``stream.tar.s2`` from
    nats-server; an archive in neither format is refused). With ``convert_to`` the archive
    is then converted to that format (:func:`convert_backup`), so that the other server
    restores it.

    ``timeout`` bounds the API reply and each wait for the next chunk. The archive is written
    under a temporary name and renamed once the server reported success (status 204); an
    archive of the other format left by an earlier backup (``force``) is removed then.
    """
    began = time.perf_counter()
    path = prepare_directory(directory, force)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, pending_bytes_limit=64 * 1024 * 1024)
    partial = path / (ARCHIVE_FILE + ".partial")
    try:
        request = {
            "deliver_subject": inbox,
            "no_consumers": not consumers,
            "chunk_size": chunk_size,
            "window_size": window_size,
            "jsck": check,
        }
        reply = await _api(nc, f"STREAM.SNAPSHOT.{stream}", request, timeout)
        if reply.get("error"):
            raise _api_error(reply, f"snapshot of {stream} failed")
        state = reply.get("state") or {}
        expected = int(state.get("bytes", 0))
        received = 0
        head = b""
        with open(partial, "wb") as out:
            while True:
                try:
                    msg = await sub.next_msg(timeout=timeout)
                except NatsTimeoutError:
                    raise BackupError(
                        f"snapshot of {stream}: no data for {timeout}s ({received} bytes in)"
                    ) from None
                if msg.data:
                    out.write(msg.data)
                    if len(head) < _SNIFF:
                        head += msg.data[: _SNIFF - len(head)]
                    received += len(msg.data)
                    if msg.reply:
                        await nc.publish(msg.reply, b"")
                    if progress is not None:
                        progress(received, expected)
                    continue
                status = (msg.headers or {}).get("Status", "")
                if status not in ("", "204"):
                    description = (msg.headers or {}).get("Description", "")
                    raise BackupError(f"snapshot of {stream} ended with {status} {description}")
                break
        kind = archive_format(head)
        if kind is None:
            raise BackupError(
                f"snapshot of {stream}: the server sent {received} bytes in no archive format "
                f"Headwater knows (first bytes {head.hex()})"
            )
        archive = path / ARCHIVE_FILES[kind]
        os.replace(partial, archive)
        for other in ARCHIVE_FILES.values():
            if other != archive.name:
                (path / other).unlink(missing_ok=True)
        backup = {"config": reply.get("config"), "state": state}
        (path / BACKUP_FILE).write_text(json.dumps(backup, indent=2))
        if convert_to is not None:
            archive = convert_backup(path, convert_to)
            received = archive.stat().st_size
        return BackupResult(
            stream=stream,
            directory=path,
            archive_bytes=received,
            messages=int(state.get("messages", 0)),
            stream_bytes=expected,
            seconds=time.perf_counter() - began,
            archive=archive,
        )
    finally:
        partial.unlink(missing_ok=True)
        await sub.unsubscribe()


async def backup_account(
    nc: Client,
    directory: str | Path,
    *,
    force: bool = False,
    consumers: bool = True,
    check: bool = False,
    timeout: float = 10.0,
    on_stream: Callable[[str], Progress | None] | None = None,
    convert_to: ArchiveFormat | None = None,
) -> list[BackupResult]:
    """Back every stream up into ``directory/<stream>/``; ``on_stream(name)`` may return a
    progress callback for that stream."""
    root = prepare_directory(directory, force)
    results = []
    for name in sorted(await stream_names(nc, timeout)):
        progress = on_stream(name) if on_stream is not None else None
        results.append(
            await backup_stream(
                nc,
                name,
                root / name,
                force=True,
                consumers=consumers,
                check=check,
                timeout=timeout,
                progress=progress,
                convert_to=convert_to,
            )
        )
    return results


@dataclass(frozen=True)
class StreamBackup:
    """One stream's backup inside an account backup: the name it restores under (its
    ``backup.json`` config's) and its directory."""

    stream: str
    directory: Path


class AccountRestoreError(BackupError):
    """An account restore stopped at one stream: which were restored before it and which
    were not (that one included); the server's codes are the failed restore's."""

    def __init__(self, error: BackupError, restored: list[str], missing: list[str]) -> None:
        super().__init__(
            f"{error}; restored: {', '.join(restored) or 'none'}; "
            f"not restored: {', '.join(missing)}",
            error.err_code,
            error.code,
        )
        self.restored = restored
        self.missing = missing


def account_backups(directory: str | Path) -> list[StreamBackup]:
    """The stream backups ``backup_account`` wrote into ``directory`` (one subdirectory per
    stream), in stream name order. Read without the server, so that a directory that is not
    an account backup is refused before anything is restored: every entry must be a stream
    backup directory, no two may hold the same stream, and there must be at least one."""
    root = Path(directory)
    if not root.is_dir():
        raise BackupError(f"{root} is not a directory")
    found: dict[str, Path] = {}
    for entry in sorted(root.iterdir()):
        if not entry.is_dir():
            raise BackupError(
                f"{entry} is not a directory (an account backup holds one directory per stream)"
            )
        backup, _archive = read_backup(entry)
        name = str(backup["config"].get("name") or "")
        if not name:
            raise BackupError(f"{entry / BACKUP_FILE} has no stream name")
        if name in found:
            raise BackupError(f"{found[name]} and {entry} both hold stream {name}")
        found[name] = entry
    if not found:
        raise BackupError(f"{root} holds no stream backups")
    return [StreamBackup(name, found[name]) for name in sorted(found)]


async def restore_account(
    nc: Client,
    backups: list[StreamBackup],
    *,
    timeout: float = 10.0,
    on_stream: Callable[[str], Progress | None] | None = None,
    on_restored: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Restore every backup of :func:`account_backups`, in order; the new streams' infos.

    Nothing is restored when any of the names is in use (natscli's ``account restore``
    checks the same up front). A restore that fails midway raises
    :class:`AccountRestoreError` naming the streams restored before it and those not; the
    ones restored stay. ``on_restored(info)`` is called after each stream."""
    existing = set(await stream_names(nc, timeout))
    taken = [b.stream for b in backups if b.stream in existing]
    if taken:
        raise BackupError(
            f"stream{'s' if len(taken) > 1 else ''} {', '.join(taken)} already "
            f"exist{'' if len(taken) > 1 else 's'} on the server; nothing was restored"
        )
    infos: list[dict[str, Any]] = []
    for index, backup in enumerate(backups):
        progress = on_stream(backup.stream) if on_stream is not None else None
        try:
            info = await restore_stream(nc, backup.directory, timeout=timeout, progress=progress)
        except BackupError as error:
            restored = [b.stream for b in backups[:index]]
            raise AccountRestoreError(
                error, restored, [b.stream for b in backups[index:]]
            ) from None
        infos.append(info)
        if on_restored is not None:
            on_restored(info)
    return infos


def read_backup(directory: str | Path) -> tuple[dict[str, Any], Path]:
    """``backup.json`` of a backup directory and the path of its archive: ``stream.hwarc``
    or ``stream.tar.s2``, exactly one of them."""
    path = Path(directory)
    meta = path / BACKUP_FILE
    found = archive_files(path)
    if len(found) > 1:
        raise BackupError(
            f"{path} holds both {ARCHIVE_FILE} and {NATS_ARCHIVE_FILE}: it is ambiguous which "
            "archive is the backup (remove the one that is not)"
        )
    if not meta.is_file() or not found:
        raise BackupError(
            f"{path} is not a backup directory ({BACKUP_FILE}, and {ARCHIVE_FILE} or "
            f"{NATS_ARCHIVE_FILE})"
        )
    try:
        backup = json.loads(meta.read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{meta}: {exc}") from None
    if not isinstance(backup, dict) or not isinstance(backup.get("config"), dict):
        raise BackupError(f"{meta} has no stream config")
    return backup, found[0]


def convert_backup(directory: str | Path, to: ArchiveFormat) -> Path:
    """Convert the backup in ``directory`` in place so that its archive is in format ``to``
    (nothing to do when it is already); the archive's path.

    ``stream.tar.s2`` is what ``nats stream restore`` and nats-server's RESTORE read, and
    ``stream.hwarc`` what Headwater snapshots hold (Headwater restores both). The conversion
    reads and checks the whole archive; the old file is removed only once the new one is
    complete, so a failure leaves the backup as it was."""
    backup, archive = read_backup(directory)
    target = Path(directory) / ARCHIVE_FILES[to]
    if archive == target:
        return archive
    config = backup["config"]
    try:
        convert_archive(archive, target, to, str(config.get("name", "")), config)
    except ArchiveError as exc:
        raise BackupError(f"{archive} cannot be converted: {exc}") from None
    except OSError as exc:
        raise BackupError(f"{archive}: {exc.strerror or exc}") from None
    archive.unlink()
    return target


def verify_archive(archive: Path, name: str, config: dict[str, Any]) -> int:
    """Read every record of ``archive`` (either format) for the stream ``name`` with ``config``;
    the number of messages it holds. ``BackupError`` when it is damaged or incomplete."""
    try:
        with open(archive, "rb") as fh:
            reader = open_archive(fh, name, config)
            summary = None
            for record in reader:
                if isinstance(record, ArchivedStream) and record.name != name:
                    raise BackupError(
                        f"{archive} failed verification: it holds stream {record.name!r}, "
                        f"not {name!r}"
                    )
                if isinstance(record, ArchiveSummary):
                    summary = record
    except ArchiveError as exc:
        raise BackupError(f"{archive} failed verification: {exc}") from None
    except OSError as exc:
        raise BackupError(f"{archive}: {exc.strerror or exc}") from None
    if summary is None:  # both readers end with a summary or raise
        raise BackupError(f"{archive} failed verification: it has no end")
    return summary.messages


SALVAGED_KEY = "headwater.io/salvaged"
"""Stream metadata a salvaged restore sets: the sequence ranges the damaged frames held."""
_MAX_MARK = 1024
"""Longest mark kept whole; beyond it the mark summarises (stream metadata has a size limit)."""


async def restore_stream(
    nc: Client,
    directory: str | Path,
    *,
    verify: bool = False,
    config: dict[str, Any] | None = None,
    timeout: float = 10.0,
    progress: Progress | None = None,
    salvage: bool = False,
) -> dict[str, Any]:
    """Restore the backup in ``directory``; returns the new stream's info (server JSON).

    The archive (either format) is sent exactly as it is stored. ``verify`` reads the whole
    archive first and refuses a damaged one without contacting the server. ``config``
    replaces the backed-up config: a Headwater archive's stream name must stay the same, a
    nats-server archive (which records no name) is restored under the config's.

    A damaged Headwater archive fails the restore; the error then names the damaged frames,
    their byte ranges and sequences. ``salvage`` restores such an archive anyway: it is rebuilt
    from its readable frames (``headwater.archive.salvage_archive``) in a temporary directory,
    the stream gets the :data:`SALVAGED_KEY` metadata, and the info returned holds a
    ``salvage`` key saying what was lost (``SalvageResult.to_dict()`` and a one-line
    ``summary``; also with no damage, then with nothing lost).
    """
    backup, archive = read_backup(directory)
    cfg = config if config is not None else backup["config"]
    name = str(cfg.get("name", ""))
    state = backup.get("state")
    if verify:
        verify_archive(archive, name, cfg)
    if not salvage:
        try:
            return await _upload(nc, name, cfg, state, archive, timeout, progress)
        except BackupError as error:
            raise await asyncio.to_thread(_explain_damage, error, archive, cfg, state) from None
    if archive.name != ARCHIVE_FILE:
        raise BackupError(
            f"{archive}: --salvage reads only Headwater archives ({ARCHIVE_FILE}); a "
            "nats-server archive cannot be read past a damaged chunk"
        )
    with tempfile.TemporaryDirectory(prefix="headwater-salvage-") as tmp:
        rebuilt = Path(tmp) / ARCHIVE_FILE
        result = await asyncio.to_thread(_salvage, archive, rebuilt, cfg, state)
        if result.damaged:
            cfg = _marked(cfg, result)
            info = await _upload(nc, name, cfg, state, rebuilt, timeout, progress)
        else:
            info = await _upload(nc, name, cfg, state, archive, timeout, progress)
    info["salvage"] = {**result.to_dict(), "summary": describe_loss(result)}
    return info


def describe_loss(result: SalvageResult) -> str:
    """One line: the damaged frames (byte ranges) and the sequences and messages they held."""
    frames = ", ".join(
        f"frame {d.frame} (bytes {d.first_byte}-{d.last_byte})" for d in result.damaged
    )
    held = f"sequences {result.ranges_text()}" if result.lost_sequences else "no message sequences"
    text = f"{frames} damaged: {held}, {result.lost_messages} messages lost"
    if result.stream_record_lost:
        text += f"; the stream record was lost ({BACKUP_FILE}'s config stands in for it)"
    return text


def _explain_damage(
    error: BackupError, archive: Path, cfg: dict[str, Any], state: Any
) -> BackupError:
    """The server's refusal of a damaged Headwater archive, with what a local salvage pass
    finds: the damaged frames and sequences, and the ``--salvage`` hint. Any other failure is
    returned as it is (the pass runs only after the server refused, never on success)."""
    if error.err_code != 10062 or archive.name != ARCHIVE_FILE:
        return error
    try:
        with open(archive, "rb") as fh:
            result = salvage_archive(fh, lambda _data: None, _fallback_stream(cfg, state))
    except (ArchiveError, OSError, ValueError):
        return error
    if not result.damaged:
        return error
    return BackupError(
        f"{error}; {describe_loss(result)}; --salvage restores the rest",
        error.err_code,
        error.code,
    )


def _salvage(archive: Path, target: Path, cfg: dict[str, Any], state: Any) -> SalvageResult:
    try:
        with open(archive, "rb") as src, open(target, "wb") as out:
            return salvage_archive(src, out.write, _fallback_stream(cfg, state))
    except ArchiveError as exc:
        raise BackupError(f"{archive} cannot be salvaged: {exc}") from None
    except OSError as exc:
        raise BackupError(f"{archive}: {exc.strerror or exc}") from None


def _fallback_stream(cfg: dict[str, Any], state: Any) -> ArchivedStream:
    """The stream record to restore with when the archive's was lost: ``backup.json``'s config
    and state (the snapshot reply's), its times turned into the archive's nanoseconds."""
    st = state if isinstance(state, dict) else {}
    ints = ("messages", "bytes", "first_seq", "last_seq", "num_deleted", "num_subjects")
    archived: dict[str, Any] = {key: int(st.get(key, 0) or 0) for key in ints}
    archived["first_ts"] = _rfc3339_ns(st.get("first_ts"))
    archived["last_ts"] = _rfc3339_ns(st.get("last_ts"))
    return ArchivedStream(
        name=str(cfg.get("name", "")),
        created_ns=_rfc3339_ns(cfg.get("created")) or time.time_ns(),
        config=cfg,
        state=archived,
    )


def _rfc3339_ns(value: Any) -> int:
    """Nanoseconds since the epoch of an RFC 3339 time with up to 9 fractional digits; 0 when
    absent or unreadable (the zero time nats-server reports for an empty stream included)."""
    if not isinstance(value, str) or not value:
        return 0
    text = value.replace("Z", "+00:00")
    whole, dot, rest = text.partition(".")
    fraction, zone = rest, ""
    for sign in ("+", "-"):
        if sign in rest:
            fraction, _, tail = rest.partition(sign)
            zone = sign + tail
            break
    try:
        moment = datetime.fromisoformat(whole + (zone if dot else ""))
    except ValueError:
        return 0
    seconds = int(moment.timestamp())
    if seconds <= 0:
        return 0
    nanos = int((fraction + "000000000")[:9]) if dot and fraction.isdigit() else 0
    return seconds * 1_000_000_000 + nanos


def _marked(cfg: dict[str, Any], result: SalvageResult) -> dict[str, Any]:
    """``cfg`` with the :data:`SALVAGED_KEY` metadata mark: the lost sequence ranges."""
    mark = result.ranges_text() or "no messages (consumer records only)"
    if len(mark) > _MAX_MARK:
        lo, hi = result.lost_sequences[0][0], result.lost_sequences[-1][1]
        mark = f"{len(result.lost_sequences)} ranges within {lo}-{hi}"
    metadata = dict(cfg.get("metadata") or {})
    metadata[SALVAGED_KEY] = mark
    return {**cfg, "metadata": metadata}


async def _upload(
    nc: Client,
    name: str,
    cfg: dict[str, Any],
    state: Any,
    archive: Path,
    timeout: float,
    progress: Progress | None,
) -> dict[str, Any]:
    """The RESTORE flow: request with ``{config, state}``, the archive in acknowledged chunks,
    the empty end message; the server's stream info."""
    reply = await _api(nc, f"STREAM.RESTORE.{name}", {"config": cfg, "state": state}, timeout)
    if reply.get("error"):
        raise _api_error(reply, f"restore of {name} refused")
    deliver = reply["deliver_subject"]
    total = archive.stat().st_size
    sent = 0
    with open(archive, "rb") as fh:
        while chunk := fh.read(UPLOAD_CHUNK):
            try:
                ack = await nc.request(deliver, chunk, timeout=timeout)
            except NatsTimeoutError:
                raise BackupError(f"restore of {name}: no ack after {sent} bytes") from None
            if ack.data:
                raise _api_error(json.loads(ack.data), f"restore of {name} failed")
            sent += len(chunk)
            if progress is not None:
                progress(sent, total)
    # The server loads the whole archive before answering: allow for its size.
    final_timeout = max(timeout, 30.0 + total / (20 * 1024 * 1024))
    try:
        done = await nc.request(deliver, b"", timeout=final_timeout)
    except NatsTimeoutError:
        raise BackupError(f"restore of {name}: no result within {final_timeout:.0f}s") from None
    result: dict[str, Any] = json.loads(done.data)
    if result.get("error"):
        raise _api_error(result, f"restore of {name} failed")
    return result
