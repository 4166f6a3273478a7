"""Stream templates: streams created on demand from a config when a matching subject is used.

nats-server 2.10 had them (``$JS.API.STREAM.TEMPLATE.*``); 2.14 removed them. Headwater keeps
the 2.10 behaviour (see docs/DIFFERENCES.md, "Stream templates"):

* a template subscribes its config's subjects (e.g. ``CLIENT.*``);
* a message on a concrete subject (``CLIENT.acme``) whose stream does not exist yet creates a
  stream named after the subject with ``.`` replaced by ``_`` (``CLIENT_acme``), subjects
  ``[<that subject>]`` and ``template_owner`` naming the template; the message that caused it
  is stored in the new stream and acknowledged like any publish;
* ``max_streams`` caps the streams one template owns; past it a message is not stored (a
  warning is logged, as nats-server does, and a request gets no reply);
* deleting a template deletes the streams it owns.

Which streams a template owns is read from the stream registry (``template_owner``), not kept
in a separate list, so it survives restarts and a stream deleted directly simply stops
counting. A file-storage template is persisted under
``<store_dir>/jetstream/$G/templates/<name>/meta.inf`` (written atomically, with a backup
copy read back if it is ever found unreadable); a memory-storage
one, like a memory stream, is forgotten at restart.

Creating a stream awaits a disk write, but subscription callbacks are synchronous: messages
for a stream being created are queued and replayed into it right after it opens, with no
await in between, so none is lost and their order is kept.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import orjson

from headwater.server.store.atomic import (
    fsync_dir,
    write_atomic,
)
from headwater.server.subscription import Subscription

from . import errors, publish
from .layout import load_metas
from .streamconfig import StreamConfig, config_from_json, config_to_json
from .streamconfig_validate import validate_create
from .wire import dumps

if TYPE_CHECKING:
    from .service import JetStreamService

__all__ = [
    "StreamTemplate",
    "TemplateConfig",
    "TemplateManager",
    "canonical_name",
    "check_not_template_owned",
    "load_templates",
    "remove_template_dir",
    "template_dir",
    "template_to_json",
    "write_template",
]

log = logging.getLogger("headwater.jetstream")

META_FILE = "meta.inf"


def canonical_name(subject: str) -> str:
    """The stream name a template gives a subject: token separators become ``_``."""
    return subject.replace(".", "_")


def check_not_template_owned(cfg: StreamConfig) -> None:
    """10049 "stream not owned by template" for a STREAM.CREATE that sets ``template_owner``.

    Only a template may create a stream it owns (2.10 refused the field on a plain create),
    otherwise a hand-made stream would be counted against, and deleted with, a template. Meant
    for :meth:`.streamapi.StreamApi.stream_create`, before the stream is created.
    """
    if cfg.template_owner:
        raise errors.STREAM_CREATE.exc(err="stream not owned by template")


@dataclass(frozen=True)
class TemplateConfig:
    """A template as created: its name, the checked stream config and the stream cap.

    ``config.name`` is ``_``, the placeholder nats-server validates the config under; each
    created stream gets its own name and subject.
    """

    name: str
    config: StreamConfig
    max_streams: int


def template_to_json(tc: TemplateConfig) -> dict[str, Any]:
    """``StreamTemplateConfig`` as the wire and the meta file carry it."""
    return {
        "name": tc.name,
        "config": config_to_json(tc.config, dynamic_metadata=False),
        "max_streams": tc.max_streams,
    }


# --- disk ---------------------------------------------------------------------------------


def templates_dir(root: Path) -> Path:
    return root / "$G" / "templates"


def template_dir(root: Path, name: str) -> Path:
    return templates_dir(root) / name


def write_template(root: Path, tc: TemplateConfig) -> None:
    """Write the template's ``meta.inf`` atomically (a crash leaves all of it or nothing),
    with a copy in ``.meta.inf.bak`` read back if the file is ever found unreadable."""
    directory = template_dir(root, tc.name)
    fresh = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    if fresh:
        fsync_dir(directory.parent)
    write_atomic(directory / META_FILE, dumps(template_to_json(tc)), backup="copy")


def remove_template_dir(root: Path, name: str) -> None:
    directory = template_dir(root, name)
    if directory.exists():
        shutil.rmtree(directory, ignore_errors=True)
        try:
            fsync_dir(directory.parent)
        except OSError:
            log.debug("could not fsync %s", directory.parent)


def load_templates(root: Path) -> list[TemplateConfig]:
    """Every stored template with a readable ``meta.inf``; unreadable ones are logged."""
    return [cfg for _, cfg in load_metas(templates_dir(root), _parse_template, "stream template")]


def _parse_template(data: bytes) -> TemplateConfig:
    """A template ``meta.inf``; ValueError when it cannot be used."""
    try:
        body = orjson.loads(data)
        return TemplateConfig(
            name=str(body["name"]),
            config=config_from_json(body["config"]),
            max_streams=int(body["max_streams"]),
        )
    except (TypeError, KeyError, msgspec.MsgspecError) as exc:
        raise ValueError(str(exc)) from exc


# --- runtime ------------------------------------------------------------------------------

Message = tuple[str, str, bytes | None, bytes]
"""(subject, reply, headers, payload) of a message waiting for its stream to be created."""


@dataclass
class StreamTemplate:
    """One live template: its config and the subscriptions that trap its subjects."""

    config: TemplateConfig
    subs: list[Subscription] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.config.name


class TemplateManager:
    """The account's templates, their subscriptions and the streams they create."""

    def __init__(self, service: JetStreamService) -> None:
        self.service = service
        self.templates: dict[str, StreamTemplate] = {}
        # Stream name -> (owning template, messages waiting for the stream to open).
        self._pending: dict[str, tuple[str, list[Message]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # --- queries ---------------------------------------------------------------------

    def get(self, name: str) -> StreamTemplate:
        template = self.templates.get(name)
        if template is None:
            raise errors.STREAM_TEMPLATE_NOT_FOUND.exc()
        return template

    def owned_streams(self, name: str) -> list[str]:
        """Streams owned by template ``name``, in creation (or recovery) order."""
        return [s.name for s in self.service.streams.values() if s.config.template_owner == name]

    def info(self, name: str) -> dict[str, Any]:
        """``StreamTemplateInfo``: the config and the owned streams (``[]`` when none)."""
        template = self.get(name)
        return {"config": template_to_json(template.config), "streams": self.owned_streams(name)}

    def names(self) -> list[str]:
        return sorted(self.templates)

    @property
    def creating(self) -> int:
        """Stream creations still running (tests wait for them to settle)."""
        return len(self._tasks)

    # --- lifecycle -------------------------------------------------------------------

    async def create(self, tc: TemplateConfig) -> StreamTemplate:
        """Register, subscribe and (for file storage) persist a new template."""
        if tc.name in self.templates:
            raise errors.STREAM_TEMPLATE_CREATE.exc(
                err=f'template with name "{tc.name}" already exists'
            )
        if tc.config.storage == "file":
            try:
                await asyncio.to_thread(write_template, self.service.root, tc)
            except OSError as exc:
                raise errors.STREAM_TEMPLATE_CREATE.exc(err=str(exc)) from None
        return self._start(tc)

    def _start(self, tc: TemplateConfig) -> StreamTemplate:
        template = StreamTemplate(tc)
        client = self.service.client
        assert client is not None
        for subject in tc.config.subjects:
            template.subs.append(client.subscribe(subject, self._callback(tc.name)))
        self.templates[tc.name] = template
        return template

    async def delete(self, name: str) -> None:
        """Stop the template, delete every stream it owns, then its file.

        The file goes last so that a crash half-way leaves the template with fewer streams
        rather than streams owned by a template that no longer exists.
        """
        template = self.get(name)
        self._stop(template)
        del self.templates[name]
        for stream in self.owned_streams(name):
            # Checked again before each delete: another task may have removed it meanwhile.
            if stream in self.service.streams:
                await self.service.delete_stream(stream)
        if template.config.config.storage == "file":
            await asyncio.to_thread(remove_template_dir, self.service.root, name)

    def _stop(self, template: StreamTemplate) -> None:
        client = self.service.client
        for sub in template.subs:
            if client is not None:
                client.unsubscribe(sub)
        template.subs.clear()
        for stream, (owner, _) in list(self._pending.items()):
            if owner == template.name:
                del self._pending[stream]

    def recover(self) -> None:
        """Restart the stored templates (after the streams, which say who owns them)."""
        for tc in load_templates(self.service.root):
            if tc.name in self.templates:
                continue
            self._start(tc)
            log.info("  Restored stream template '$G > %s'", tc.name)

    async def close(self) -> None:
        """Unsubscribe everything and wait for stream creations still running."""
        for template in self.templates.values():
            self._stop(template)
        self.templates.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # --- auto-creation ---------------------------------------------------------------

    def _callback(self, name: str) -> Callable[..., None]:
        def on_message(
            sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
        ) -> None:
            self.on_message(name, subject, reply, hdr, bytes(payload))

        return on_message

    def on_message(
        self, name: str, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        """A message on a template subject: create its stream unless it exists already."""
        template = self.templates.get(name)
        if template is None:
            return
        stream_name = canonical_name(subject)
        if stream_name in self.service.streams:
            return  # the stream's own subscription has the message
        waiting = self._pending.get(stream_name)
        if waiting is not None:
            waiting[1].append((subject, reply, hdr, payload))
            return
        creating = sum(1 for owner, _ in self._pending.values() if owner == name)
        if len(self.owned_streams(name)) + creating >= template.config.max_streams:
            log.warning(
                'JetStream could not create stream for account "$G" on subject "%s", at limit',
                subject,
            )
            return
        try:
            cfg = self._stream_config(template, stream_name, subject)
        except errors.ApiErrorException as exc:
            log.warning(
                'JetStream could not create stream for account "$G" on subject "%s": %s',
                subject,
                exc.error.description,
            )
            return
        self._pending[stream_name] = (name, [(subject, reply, hdr, payload)])
        task = asyncio.get_running_loop().create_task(self._create(cfg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _stream_config(self, template: StreamTemplate, name: str, subject: str) -> StreamConfig:
        svc = self.service
        cfg = msgspec.structs.replace(
            template.config.config, name=name, subjects=(subject,), template_owner=template.name
        )
        configs = [s.config for s in svc.streams.values()]
        outcome = validate_create(cfg, configs, svc.stream_limits)
        svc.resources.check_reservation(outcome.config, configs)
        return outcome.config

    async def _create(self, cfg: StreamConfig) -> None:
        try:
            stream = await self.service.create_stream(cfg)
        except errors.ApiErrorException as exc:
            self._pending.pop(cfg.name, None)
            log.warning(
                "JetStream could not create stream '%s' from template '%s': %s",
                cfg.name,
                cfg.template_owner,
                exc.error.description,
            )
            return
        # No await from here to the replay: the stream is subscribed now, so any later
        # message reaches it directly, and the queued ones go in first, in arrival order.
        entry = self._pending.pop(cfg.name, None)
        if entry is None or cfg.template_owner not in self.templates:
            # The template was deleted while the stream was being created.
            if cfg.name in self.service.streams:
                await self.service.delete_stream(cfg.name)
            return
        for subject, reply, hdr, payload in entry[1]:
            publish.process(stream, subject, reply, hdr, payload)
