"""Data sources: read a stream, a consumer or a KV entry that Terraform does not manage."""

from __future__ import annotations

from typing import Any, ClassVar

from nats.aio.client import Client
from tf import schema, types
from tf.utils import Diagnostics

from headwater.control.models import ResourceKey
from headwater_terraform.assets import (
    ConsumerResource,
    CoreResource,
    Failed,
    State,
    StreamResource,
    has_unknown,
)
from headwater_terraform.errors import server_error
from headwater_terraform.kv_entry import read_entry
from headwater_terraform.live import Snapshot, read_one


class _CoreDataSource:
    RESOURCE: ClassVar[type[CoreResource]]
    STATE_FIELDS: ClassVar[tuple[tuple[str, str, str], ...]]
    """(attribute, info section, key in that section's ``state``) of live counters."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        return cls.RESOURCE.NAME

    @classmethod
    def get_schema(cls) -> schema.Schema:
        resource = cls.RESOURCE
        return schema.Schema(
            attributes=[
                schema.Attribute("id", types.String(), computed=True),
                *(item.attribute(required=True) for item in resource.IDENTITY),
                *(item.attribute(optional=False) for item in resource.FIELDS),
                *(
                    schema.Attribute(name, types.Number(), computed=True)
                    for name, _section, _key in cls.STATE_FIELDS
                ),
            ]
        )

    def validate(self, diags: Diagnostics, type_name: str, config: State) -> None:
        for item in self.RESOURCE.IDENTITY:
            value = config.get(item.name)
            if isinstance(value, str) and not value:
                diags.add_error(f"Invalid {item.name}", "must not be empty", path=[item.name])

    def read(self, ctx: Any, config: State) -> State | None:
        diags: Diagnostics = ctx.diagnostics
        if has_unknown(config):
            return None
        key = self.RESOURCE.key_of(config)

        async def body(nc: Client) -> Snapshot:
            return await read_one(nc, key)

        try:
            snapshot = self.provider.run(body)
        except Exception as error:  # every failure becomes a diagnostic
            server_error(diags, f"Reading {key}", error)
            return None
        return self.state(diags, snapshot, key)

    def state(self, diags: Diagnostics, snapshot: Snapshot, key: ResourceKey) -> State | None:
        if snapshot.config(key) is None:
            diags.add_error(f"{key} not found", f"The server has no {key}.")
            return None
        resource = self.RESOURCE
        limits = resource.limits(snapshot, key)
        try:
            spec = resource.canonical(snapshot.live.spec(key), limits)
        except (ValueError, Failed) as error:
            diags.add_error(f"The live config of {key} does not parse", str(error))
            return None
        state = resource.values_of(spec)
        state["id"] = resource.id_of(key)
        for name, section, field in self.STATE_FIELDS:
            info = snapshot.infos.get(section) or {}
            container = info.get("state") if section == "stream" else info
            state[name] = int((container or {}).get(field) or 0)
        return state


class StreamDataSource(_CoreDataSource):
    RESOURCE = StreamResource
    STATE_FIELDS = (
        ("messages", "stream", "messages"),
        ("bytes", "stream", "bytes"),
        ("last_seq", "stream", "last_seq"),
        ("consumer_count", "stream", "consumer_count"),
    )


class ConsumerDataSource(_CoreDataSource):
    RESOURCE = ConsumerResource
    STATE_FIELDS = (
        ("num_pending", "consumer", "num_pending"),
        ("num_ack_pending", "consumer", "num_ack_pending"),
        ("num_waiting", "consumer", "num_waiting"),
    )


class KvEntryDataSource:
    def __init__(self, provider: Any) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        return "kv_entry"

    @classmethod
    def get_schema(cls) -> schema.Schema:
        return schema.Schema(
            attributes=[
                schema.Attribute("id", types.String(), computed=True),
                schema.Attribute("bucket", types.String(), required=True),
                schema.Attribute("key", types.String(), required=True),
                schema.Attribute("value", types.String(), computed=True),
                schema.Attribute("revision", types.Number(), computed=True),
            ]
        )

    def validate(self, diags: Diagnostics, type_name: str, config: State) -> None:
        for name in ("bucket", "key"):
            if config.get(name) == "":
                diags.add_error(f"Invalid {name}", "must not be empty", path=[name])

    def read(self, ctx: Any, config: State) -> State | None:
        diags: Diagnostics = ctx.diagnostics
        bucket, key = config.get("bucket"), config.get("key")

        async def body(nc: Client) -> tuple[str, int] | None:
            return await read_entry(nc, str(bucket), str(key))

        try:
            found = self.provider.run(body)
        except Exception as error:  # every failure becomes a diagnostic
            server_error(diags, f"Reading {bucket}/{key}", error)
            return None
        if found is None:
            diags.add_error(f"{bucket}/{key} not found", f"Bucket {bucket} has no key {key}.")
            return None
        value, revision = found
        return {
            "id": f"{bucket}/{key}",
            "bucket": bucket,
            "key": key,
            "value": value,
            "revision": revision,
        }


DATA_SOURCES = (StreamDataSource, ConsumerDataSource, KvEntryDataSource)
