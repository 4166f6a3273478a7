"""Handlers of ``$JS.API.STREAM.TEMPLATE.*`` (see :data:`TEMPLATE_ROUTES`).

The checks follow nats-server 2.10's order: invalid JSON (10025), template name in the subject
differing from the body's (10073), then the template itself (10066: the config names a stream,
the name is too long, or it exists), then the stream config as a stream create checks it
(mostly 10052). INFO and DELETE refuse a non-empty body (10038) before looking the template
up (10068). 2.10 answered NAMES with the template names under the ``streams`` key, which is
kept so its clients read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import msgspec

from . import errors
from .api import Request, Route, decode_request
from .gojson import GoType
from .streamconfig import _REQUEST, config_from_json
from .streamconfig_validate import (
    MAX_NAME_LEN,
    check_stream_config,
    refuse_templated,
    refuse_unsupported,
)
from .templates import TemplateConfig, TemplateManager
from .wire import is_empty_request

__all__ = ["TEMPLATE_NAMES_LIMIT", "TEMPLATE_ROUTES", "TemplateApi"]

TEMPLATE_NAMES_LIMIT = 1024
"""Template names per NAMES page (nats-server's ``JSApiNamesLimit``)."""

MAX_STREAMS = 2**32 - 1
"""``max_streams`` is a Go ``uint32``."""

_PAGED: Mapping[str, Any] = MappingProxyType({"total": 0, "offset": 0, "limit": 0})

TEMPLATE_ROUTES: tuple[Route, ...] = (
    Route(("STREAM", "TEMPLATE", "CREATE", "*"), "template_create", "stream_template_create"),
    Route(("STREAM", "TEMPLATE", "INFO", "*"), "template_info", "stream_template_info"),
    Route(("STREAM", "TEMPLATE", "DELETE", "*"), "template_delete", "stream_template_delete"),
    Route(
        ("STREAM", "TEMPLATE", "NAMES"),
        "template_names",
        "stream_template_names",
        {**_PAGED, "streams": None},
    ),
)

_CREATE_REQUEST = GoType(
    "server.StreamTemplateConfig",
    "struct",
    {
        "name": GoType("string", "str"),
        "config": GoType("server.StreamConfig", "struct", _REQUEST.fields, pointer=True),
        "max_streams": GoType("uint64", "int"),
    },
)
_NAMES_REQUEST = GoType(
    "server.JSApiStreamTemplatesRequest", "struct", {"offset": GoType("int", "int")}
)


def _template_name(req: Request) -> str:
    return req.tokens[-1]


def _create_error(text: str) -> errors.ApiErrorException:
    return errors.STREAM_TEMPLATE_CREATE.exc(err=text)


def parse_template_request(body: bytes, name_in_subject: str) -> TemplateConfig:
    """Decode and check a TEMPLATE.CREATE body; raises ``ApiErrorException`` in 2.10's order."""
    fields = decode_request(body, _CREATE_REQUEST, "StreamTemplateConfig")
    name = fields.get("name", "")
    if name != name_in_subject:
        raise errors.TEMPLATE_NAME_NOT_MATCH_SUBJECT.exc()
    raw_config = fields.get("config")
    if raw_config is None:
        # 2.10 dereferenced the missing config and failed; say what is wrong instead.
        raise _create_error("template config is required")
    raw_config = dict(raw_config)
    raw_config.pop("pedantic", None)
    cfg = config_from_json(raw_config)
    if cfg.name:
        raise _create_error("template config name should be empty")
    if len(name.encode()) > MAX_NAME_LEN:
        raise _create_error(f"template name is too long, maximum allowed is {MAX_NAME_LEN}")
    if "/" in name or "\\" in name:
        # The name becomes a directory under the store: no path tricks (a Headwater check).
        raise _create_error("template name can not contain path separators")
    max_streams = fields.get("max_streams", 0)
    if max_streams > MAX_STREAMS:
        raise errors.INVALID_JSON.exc(
            err=f"json: cannot unmarshal number {max_streams} into Go struct field "
            "StreamTemplateConfig.max_streams of type uint32"
        )
    # Checked under a placeholder name, as 2.10 did; each created stream gets its own.
    checked = check_stream_config(msgspec.structs.replace(cfg, name="_"))
    refuse_unsupported(checked)
    refuse_templated(checked)
    return TemplateConfig(name=name, config=checked, max_streams=max_streams)


class TemplateApi:
    """The handler object the router calls by name for template endpoints."""

    def __init__(self, manager: TemplateManager) -> None:
        self.manager = manager

    async def template_create(self, req: Request) -> dict[str, Any]:
        tc = parse_template_request(req.body, _template_name(req))
        template = await self.manager.create(tc)
        return self.manager.info(template.name)

    async def template_info(self, req: Request) -> dict[str, Any]:
        if not is_empty_request(req.body):
            raise errors.NOT_EMPTY_REQUEST.exc()
        return self.manager.info(_template_name(req))

    async def template_delete(self, req: Request) -> dict[str, Any]:
        if not is_empty_request(req.body):
            raise errors.NOT_EMPTY_REQUEST.exc()
        await self.manager.delete(_template_name(req))
        return {"success": True}

    async def template_names(self, req: Request) -> dict[str, Any]:
        offset = 0
        if not is_empty_request(req.body):
            fields = decode_request(req.body, _NAMES_REQUEST, "JSApiStreamTemplatesRequest")
            offset = max(fields.get("offset", 0), 0)
        names = self.manager.names()
        offset = min(offset, len(names))
        return {
            "total": len(names),
            "offset": offset,
            "limit": TEMPLATE_NAMES_LIMIT,
            "streams": names[offset : offset + TEMPLATE_NAMES_LIMIT],
        }
