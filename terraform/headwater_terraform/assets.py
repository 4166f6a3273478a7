"""Resources the control-plane core manages: plan, apply and refresh through the core.

Every decision comes from ``headwater.control``: the desired spec is built from the
configuration exactly as a YAML document would be, the core's ``make_plan`` compares it with
the live config (defaults filled on both sides) and says noop, update or replace, and the
core's ``apply_plan`` makes the change. This module only translates between Terraform values
and specs:

* planned values: an attribute the core says is unchanged keeps its prior spelling
  (``"365d"`` stays ``"365d"`` while the server holds one year), so nothing diffs forever; an
  attribute left out of the configuration plans to the value the server will hold;
* replacements: an attribute forces replacement when the core's ``replace_reasons`` say its
  change alone can not be made in place; a replacement is refused (a plan-time error naming
  the attribute) unless ``allow_replace = true``;
* refresh: the live config is compared with the state through the core, and only attributes
  that really differ take the live value, so drift shows and spelling does not;
* ownership: every spec is written as the provider's ``owner`` (``headwater.io/managed-by``),
  shown as the computed ``managed_by``; an asset another owner manages is refused (create,
  update, delete), unless this configuration imported it from that owner (see ``ownership``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from nats.aio.client import Client
from pydantic import ValidationError
from tf import schema, types
from tf.types import Unknown
from tf.utils import Diagnostics

from headwater.control.apply import Status, apply_plan
from headwater.control.documents import Resource
from headwater.control.models import (
    CONTROL_METADATA_KEYS,
    MANAGED_BY_KEY,
    MANAGED_BY_VALUE,
    Consumer,
    KeyValue,
    ObjectStore,
    ResourceKey,
    ResourceSpec,
    Stream,
    StreamTemplate,
)
from headwater.control.models.common import ConsumerLimits
from headwater.control.plan import Action, Change, Plan, PlanError, diff, make_plan
from headwater_terraform.errors import SpecErrors, server_error, spec_errors
from headwater_terraform.fields import Field
from headwater_terraform.live import Snapshot, read_one
from headwater_terraform.ownership import BEFORE_OWNERS, adopt_hint, adopt_private
from headwater_terraform.tables import BUCKET_FIELDS, CONSUMER_FIELDS, KV_FIELDS, STREAM_FIELDS

State = dict[str, Any]
SCHEMA_VERSION = 2
"""Bumped whenever attributes are added; ``upgrade`` fills the new ones from the server."""

ALLOW_REPLACE = Field(
    "allow_replace",
    "bool",
    "Allow Terraform to delete and re-create this resource when a change can not be made in "
    "place (this loses its messages or a consumer's position). Default false: such a plan "
    "fails and names the attribute.",
)


MANAGED_BY = "managed_by"
MANAGED_BY_HELP = (
    "Who manages it on the server: its `headwater.io/managed-by` marker. Planned to the "
    "provider's `owner`; another owner's value here is refused unless this configuration "
    "imported it."
)
MARKER_PATH = f"metadata.{MANAGED_BY_KEY}"
"""The core's diff path of the ownership marker."""

IDENTITY_PLACEHOLDER = "unknown-until-plan"
"""Stands in for an unknown name while validating the other attributes."""


def has_unknown(value: Any) -> bool:
    if value is Unknown:
        return True
    if isinstance(value, Mapping):
        return any(has_unknown(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_unknown(v) for v in value)
    return False


class Failed(Exception):
    """An operation failed and its diagnostics are already recorded."""


class CoreResource(ABC):
    """A Terraform resource backed by one control-plane kind."""

    NAME: ClassVar[str]
    """Type name without the provider prefix (``stream`` -> ``headwater_stream``)."""
    MODEL: ClassVar[type[ResourceSpec]]
    IDENTITY: ClassVar[tuple[Field, ...]]
    FIELDS: ClassVar[tuple[Field, ...]]
    ID_HELP: ClassVar[str]
    LIMIT_FIELDS: ClassVar[frozenset[str]] = frozenset()
    """Attributes whose default depends on another resource (a consumer's stream limits)."""
    CREATED: ClassVar[bool] = False
    """Has a computed ``created`` (the stream's creation time): it changes only when the
    resource is replaced, so ``replace_triggered_by`` can re-create dependents with it."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider

    # -- schema -----------------------------------------------------------------------

    @classmethod
    def get_name(cls) -> str:
        return cls.NAME

    @classmethod
    def type_name(cls) -> str:
        return f"headwater_{cls.NAME}"

    @classmethod
    def get_schema(cls) -> schema.Schema:
        attributes = [
            schema.Attribute(
                "id", types.String(), description=cls.ID_HELP, computed=True, optional=False
            ),
            *(item.attribute(required=True) for item in cls.IDENTITY),
            *(item.attribute() for item in cls.FIELDS),
            ALLOW_REPLACE.attribute(computed=False),
            schema.Attribute(
                MANAGED_BY, types.String(), description=MANAGED_BY_HELP, computed=True
            ),
        ]
        if cls.CREATED:
            attributes.append(
                schema.Attribute(
                    "created",
                    types.String(),
                    description="When the server created it; changes only on replacement.",
                    computed=True,
                )
            )
        return schema.Schema(version=SCHEMA_VERSION, attributes=attributes)

    @classmethod
    def all_fields(cls) -> tuple[Field, ...]:
        return (*cls.IDENTITY, *cls.FIELDS)

    @classmethod
    def attribute_names(cls) -> list[str]:
        names = ["id", *(f.name for f in cls.all_fields()), ALLOW_REPLACE.name, MANAGED_BY]
        return [*names, "created"] if cls.CREATED else names

    # -- translation (per kind) -------------------------------------------------------

    @classmethod
    def spec_input(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """Terraform values (no unknowns) as the spec model's input."""
        out: dict[str, Any] = {}
        for item in cls.all_fields():
            converted = item.to_spec(values.get(item.name))
            if converted is not None:
                out[item.name] = converted
        return out

    @classmethod
    def build_spec(cls, values: Mapping[str, Any]) -> ResourceSpec:
        try:
            return cls.MODEL.model_validate(cls.spec_input(values))
        except ValidationError as failure:
            names = [f.name for f in cls.all_fields()]
            raise spec_errors(failure, names, values) from failure

    @classmethod
    @abstractmethod
    def key_of(cls, values: Mapping[str, Any]) -> ResourceKey:
        """The server identity named by a configuration or state."""

    @classmethod
    def id_of(cls, key: ResourceKey) -> str:
        return key.name

    @classmethod
    @abstractmethod
    def key_from_id(cls, import_id: str) -> ResourceKey:
        """The server identity an import ID names (raises ValueError when malformed)."""

    @classmethod
    def canonical(cls, spec: ResourceSpec, limits: ConsumerLimits | None) -> ResourceSpec:
        """The spec with every default the server fills made explicit."""
        config = spec.to_server_config(control=False, limits=limits)
        return type(spec).from_server_config(config, stream=spec.key.stream)

    @classmethod
    def values_of(cls, spec: ResourceSpec) -> State:
        """Terraform values of a canonical spec (control metadata left out)."""
        out: State = {}
        for item in cls.all_fields():
            value = getattr(spec, item.name)
            if item.kind == "map" and value:
                value = {k: v for k, v in value.items() if k not in CONTROL_METADATA_KEYS}
            out[item.name] = item.to_terraform(value)
        return out

    @classmethod
    def attribute_of(cls, path: str) -> str | None:
        """The attribute a field path of the core's diff belongs to."""
        if path == MARKER_PATH:
            return MANAGED_BY
        head = path.split(".", 1)[0]
        return head if head in {f.name for f in cls.all_fields()} else None

    # -- plumbing ---------------------------------------------------------------------

    @property
    def owner(self) -> str:
        """The provider's ``owner``: the marker every create and update writes."""
        return str(self.provider.owner)

    def run(self, diags: Diagnostics, action: str, body: Any) -> Any:
        try:
            return self.provider.run(body)
        except Failed:
            raise
        except Exception as error:  # every failure becomes a diagnostic
            server_error(diags, action, error)
            raise Failed from error

    def snapshot(self, diags: Diagnostics, key: ResourceKey) -> Snapshot:
        async def body(nc: Client) -> Snapshot:
            return await read_one(nc, key)

        return self.run(diags, f"Reading {key}", body)

    @staticmethod
    def created(snapshot: Snapshot) -> str | None:
        created = (snapshot.infos.get("stream") or {}).get("created")
        return str(created) if created else None

    @staticmethod
    def limits(snapshot: Snapshot, key: ResourceKey) -> ConsumerLimits | None:
        if key.kind != "Consumer":
            return None
        return snapshot.live.consumer_limits(key.stream)

    def spec_or_report(self, diags: Diagnostics, values: Mapping[str, Any]) -> ResourceSpec:
        """The spec as this provider's owner writes it (its marker included)."""
        try:
            return self.build_spec(values).owned_by(self.owner)
        except SpecErrors as errors:
            errors.report(diags, self.type_name())
            raise Failed from errors

    # -- validation -------------------------------------------------------------------

    def validate(self, diags: Diagnostics, type_name: str, config: State) -> None:
        """Invalid values and combinations fail here, before anything talks to a server.

        Values that refer to other resources are unknown until plan (a consumer's
        ``stream_name`` usually is): the known values are still checked one by one, and
        combinations once everything is known."""
        unknown = {name for name, value in config.items() if has_unknown(value)}
        known = {name: value for name, value in config.items() if name not in unknown}
        for item in self.IDENTITY:
            if item.name in unknown:
                known[item.name] = IDENTITY_PLACEHOLDER
        try:
            self.build_spec(known)
        except SpecErrors as errors:
            if unknown:
                errors = errors.only_located(unknown)
            errors.report(diags, type_name)

    # -- plan -------------------------------------------------------------------------

    def plan(
        self, diags: Diagnostics, prior: State | None, config: State, adopt: str | None = None
    ) -> tuple[State | None, list[str]]:
        """The planned state and the attributes that force a replacement. ``adopt``: the
        owner this configuration imported the resource from (its private state)."""
        if has_unknown(config):
            return self._plan_unknown(prior, config), []
        try:
            spec = self.spec_or_report(diags, config)
            key = spec.key
            snapshot = self.snapshot(diags, key)
        except Failed:
            return None, []
        limits = self.limits(snapshot, key)
        stream_missing = key.kind == "Consumer" and key.stream not in snapshot.live.streams
        canonical = self.values_of(self.canonical(spec, limits))
        if stream_missing:
            # Its stream is created in the same apply: limits-derived defaults are unknown.
            for name in self.LIMIT_FIELDS:
                if config.get(name) is None:
                    canonical[name] = Unknown
        if prior is None:
            return self._planned(None, config, canonical, set(), key), []
        prior_key = self.key_of(prior)
        if prior_key != key:
            return self._plan_rename(diags, prior, config, canonical, prior_key, key)
        if stream_missing or snapshot.config(key) is None:
            # Gone since the refresh: apply creates it again with the configured values.
            changed = {f.name for f in self.all_fields()}
            return self._planned(prior, config, canonical, changed, key), []
        change = self.core_change(spec, snapshot, config, adopt)
        if change.conflict:
            diags.add_error(f"{key} is managed by owner {change.conflict!r}", change.refused)
            return None, []
        changed = {a for f in change.fields if (a := self.attribute_of(f.path)) is not None}
        forcing: list[str] = []
        if change.action is Action.REPLACE:
            forcing = self._forcing(spec, change, snapshot, key) or sorted(changed)
            if change.refused:
                self._refuse(diags, key, change, forcing)
                return None, []
        elif change.refused:
            diags.add_error(f"Can not change {key}", change.refused)
            return None, []
        planned = self._planned(prior, config, canonical, changed, key)
        if forcing and self.CREATED:
            planned["created"] = Unknown
        return planned, forcing

    def core_change(
        self, spec: ResourceSpec, snapshot: Snapshot, config: State, adopt: str | None = None
    ) -> Change:
        """The core's change, as this provider's owner. An import adopts only from the owner
        it was imported from: a resource that changed hands since is refused again."""
        resource = Resource(spec=spec, file=self.type_name())
        allow = bool(config.get("allow_replace"))
        adopting = adopt is not None and adopt == snapshot.live.owner(spec.key)
        try:
            plan = make_plan(
                [resource],
                snapshot.live,
                owner=self.owner,
                allow_replace=allow,
                adopt=adopting,
                adopt_hint=adopt_hint(self.type_name(), self.id_of(spec.key)),
            )
        except PlanError:
            return Change(spec.key, Action.CREATE, spec=spec)
        for change in plan.changes:
            if change.key == spec.key:
                return change
        return Change(spec.key, Action.CREATE, spec=spec)

    def _forcing(
        self, spec: ResourceSpec, change: Change, snapshot: Snapshot, key: ResourceKey
    ) -> list[str]:
        """Attributes whose change alone the server can not make in place."""
        limits = self.limits(snapshot, key)
        context = {"limits": limits} if limits is not None else {}
        before = snapshot.live.spec(key).comparable(control=False, **context)
        after = spec.comparable(control=True, **context)
        forcing: set[str] = set()
        for item in change.fields:
            top = item.path.split(".", 1)[0]
            trial = dict(before)
            if top in after:
                trial[top] = after[top]
            else:
                trial.pop(top, None)
            attribute = self.attribute_of(item.path)
            if attribute and spec.replace_reasons(before, trial):
                forcing.add(attribute)
        return sorted(forcing)

    def _refuse(
        self, diags: Diagnostics, key: ResourceKey, change: Change, forcing: Sequence[str]
    ) -> None:
        names = ", ".join(forcing)
        reasons = "; ".join(change.reasons)
        if "preventDelete" in change.refused:
            detail = f"{reasons}. {change.refused}."
        else:
            detail = (
                f"{reasons}. Terraform would delete {key} and create it again, losing its "
                f"data. Set allow_replace = true on the resource to allow this."
            )
        diags.add_error(
            f"Changing {names} replaces {key}",
            detail,
            path=[forcing[0]] if forcing else None,
        )

    def _plan_rename(
        self,
        diags: Diagnostics,
        prior: State,
        config: State,
        canonical: State,
        prior_key: ResourceKey,
        key: ResourceKey,
    ) -> tuple[State | None, list[str]]:
        forcing = [
            f.name for f in self.IDENTITY if not f.same(prior.get(f.name), config.get(f.name))
        ]
        if not config.get("allow_replace"):
            diags.add_error(
                f"Changing {', '.join(forcing)} replaces {prior_key}",
                f"The server name changes from {prior_key} to {key}: Terraform would delete "
                f"{prior_key} with its data. Set allow_replace = true on the resource to "
                "allow this.",
                path=[forcing[0]] if forcing else None,
            )
            return None, []
        planned = self._planned(None, config, canonical, set(), key)
        return planned, forcing

    def _planned(
        self,
        prior: State | None,
        config: State,
        canonical: State,
        changed: set[str],
        key: ResourceKey,
    ) -> State:
        planned: State = {
            "id": self.id_of(key),
            "allow_replace": config.get("allow_replace"),
            MANAGED_BY: self.owner,
        }
        if self.CREATED:
            planned["created"] = prior.get("created") if prior is not None else Unknown
        for item in self.all_fields():
            name = item.name
            wanted = config.get(name)
            before = prior.get(name) if prior is not None else None
            if prior is not None and name not in changed and before is not None:
                # The core sees no change: keep the prior spelling ("365d" stays "365d").
                same = wanted is None or item.same(wanted, before)
                planned[name] = before if same else wanted
            elif wanted is not None:
                planned[name] = wanted
            else:
                planned[name] = canonical.get(name)
        return planned

    def _plan_unknown(self, prior: State | None, config: State) -> State:
        """Some values are only known during apply: plan what is known."""
        planned: State = {"id": prior.get("id") if prior else Unknown}
        planned["allow_replace"] = config.get("allow_replace")
        planned[MANAGED_BY] = self.owner
        for item in self.all_fields():
            wanted = config.get(item.name)
            planned[item.name] = wanted if wanted is not None else Unknown
        if self.CREATED:
            planned["created"] = prior.get("created") if prior else Unknown
        return planned

    # -- apply ------------------------------------------------------------------------

    def create(self, diags: Diagnostics, planned: State, config: State) -> State | None:
        try:
            spec = self.spec_or_report(diags, config)
            key = spec.key
            snapshot = self.snapshot(diags, key)
            if snapshot.config(key) is not None:
                current = snapshot.live.owner(key)
                who = f"managed by owner {current!r}" if current else "managed by nobody"
                diags.add_error(
                    f"{key} already exists",
                    f"It is not in Terraform's state and is {who}. Import it with: terraform "
                    f"import {self.type_name()}.<name> {self.id_of(key)}",
                )
                return None
            self._apply(diags, Change(key, Action.CREATE, spec=spec), f"Creating {key}")
            return self._settled(diags, planned, key)
        except Failed:
            return None

    def update(
        self,
        diags: Diagnostics,
        prior: State,
        planned: State,
        config: State,
        adopt: str | None = None,
    ) -> State | None:
        try:
            spec = self.spec_or_report(diags, config)
            key = spec.key
            snapshot = self.snapshot(diags, key)
            change = self.core_change(spec, snapshot, config, adopt)
            if change.action is not Action.NOOP:
                self._apply(diags, change, f"Updating {key}")
            return self._settled(diags, planned, key)
        except Failed:
            return prior

    def delete(self, diags: Diagnostics, prior: State, adopt: str | None = None) -> None:
        """Delete it, unless another owner manages it now: then it stays on the server and
        in the state, and the error says whose it is."""
        key = self.key_of(prior)
        try:
            snapshot = self.snapshot(diags, key)
            current = snapshot.live.owner(key) if snapshot.config(key) is not None else None
            if current not in (None, self.owner, adopt):
                diags.add_error(
                    f"Deleting {key} refused",
                    f"It is managed by owner {current!r}, not by {self.owner!r}: Terraform "
                    f"leaves it alone. Forget it here with: terraform state rm "
                    f"{self.type_name()}.<name>",
                )
                return
            self._apply(diags, Change(key, Action.DELETE), f"Deleting {key}")
        except Failed:
            return

    def _apply(self, diags: Diagnostics, change: Change, action: str) -> None:
        """One change through the core's ``apply_plan``; a failure records the server's text.
        A change refused now (the server drifted since the plan) is not sent at all."""
        if change.refused:
            diags.add_error(f"{action} refused", change.refused)
            raise Failed

        async def body(nc: Client) -> Any:
            return await apply_plan(nc, Plan(changes=[change], owner=self.owner))

        report = self.run(diags, action, body)
        for result in report.results:
            if result.status is Status.FAILED:
                diags.add_error(f"{action} failed: {result.message}", result.message)
                raise Failed

    def _settled(self, diags: Diagnostics, planned: State, key: ResourceKey) -> State:
        """The planned state with what was unknown at plan time read from the server."""
        snapshot = self.snapshot(diags, key)
        config = snapshot.config(key)
        if config is None:
            diags.add_error(f"{key} vanished right after it was applied", "Run terraform plan.")
            raise Failed
        live = self.values_of(self.canonical(snapshot.live.spec(key), self.limits(snapshot, key)))
        live["created"] = self.created(snapshot)
        state = dict(planned)
        for name, value in state.items():
            if value is Unknown:
                state[name] = live.get(name)
        state["id"] = self.id_of(key)
        return state

    # -- refresh, import, upgrade ------------------------------------------------------

    def read(self, diags: Diagnostics, prior: State) -> State | None:
        key = self.key_of(prior)
        try:
            snapshot = self.snapshot(diags, key)
        except Failed:
            return prior
        if snapshot.config(key) is None:
            return None  # deleted behind Terraform's back: the next plan creates it
        limits = self.limits(snapshot, key)
        try:
            live_spec = snapshot.live.spec(key)
        except (ValueError, ValidationError) as error:
            diags.add_error(f"The live config of {key} does not parse", str(error))
            return prior
        live = self.values_of(self.canonical(live_spec, limits))
        live["id"] = self.id_of(key)
        live["allow_replace"] = prior.get("allow_replace")
        live[MANAGED_BY] = snapshot.live.owner(key)
        if self.CREATED:
            live["created"] = self.created(snapshot)
        try:
            desired = self.build_spec(prior)
        except SpecErrors:
            return live
        context = {"limits": limits} if limits is not None else {}
        before = live_spec.comparable(control=False, **context)
        after = desired.comparable(control=True, **context)
        changed = {a for f in diff(before, after) if (a := self.attribute_of(f.path))}
        state = dict(prior)
        state["id"] = live["id"]
        state[MANAGED_BY] = live[MANAGED_BY]
        if self.CREATED:
            state["created"] = live["created"]
        for item in self.all_fields():
            name = item.name
            if name in changed or (prior.get(name) is None and live.get(name) is not None):
                state[name] = live.get(name)
        return state

    def import_(self, diags: Diagnostics, import_id: str) -> State | None:
        try:
            key = self.key_from_id(import_id)
        except ValueError as error:
            diags.add_error(f"Invalid import ID {import_id!r}", f"{error}. {self.ID_HELP}")
            return None
        try:
            snapshot = self.snapshot(diags, key)
        except Failed:
            return None
        if snapshot.config(key) is None:
            diags.add_error(f"Cannot import {key}", f"The server has no {key}.")
            return None
        spec = snapshot.live.spec(key)
        state = self.values_of(self.canonical(spec, self.limits(snapshot, key)))
        state["id"] = self.id_of(key)
        state["allow_replace"] = None
        state[MANAGED_BY] = snapshot.live.owner(key)
        if self.CREATED:
            state["created"] = self.created(snapshot)
        return state

    def import_private(self, state: State) -> bytes:
        """Private state of an import: importing is adopting from the live owner, carried to
        the apply that writes this provider's marker."""
        current = state.get(MANAGED_BY)
        return adopt_private(current if current != self.owner else None)

    def read_private(self, prior: State, state: State | None, private: bytes) -> bytes:
        """Private state after a refresh. State from before ``managed_by`` existed was
        written by a provider that put the legacy marker on everything it managed: a legacy
        marker there is this configuration's own, adopted like an import."""
        legacy = state is not None and state.get(MANAGED_BY) == MANAGED_BY_VALUE
        if prior.get(MANAGED_BY) == BEFORE_OWNERS and legacy:
            return adopt_private(MANAGED_BY_VALUE)
        return private

    def upgrade(self, diags: Diagnostics, version: int, old: State) -> State:
        """State written by an older schema: attributes it lacks start as null, and the next
        refresh fills them from the server; attributes since removed are dropped. State from
        before version 2 gets ``managed_by`` ``BEFORE_OWNERS`` (see ``read_private``)."""
        names = self.attribute_names()
        state = {name: old.get(name) for name in names}
        if version < 2 and MANAGED_BY not in old:
            state[MANAGED_BY] = BEFORE_OWNERS
        return state


def _split_id(import_id: str, parts: int, help_text: str) -> list[str]:
    pieces = import_id.split("/", parts - 1)
    if len(pieces) != parts or not all(pieces):
        raise ValueError(f"expected {help_text}")
    return pieces


class StreamResource(CoreResource):
    NAME = "stream"
    MODEL = Stream
    IDENTITY = (Field("name", description="The stream's name on the server."),)
    FIELDS = STREAM_FIELDS
    ID_HELP = "The stream name, e.g. `ORDERS`."
    CREATED = True

    @classmethod
    def key_of(cls, values: Mapping[str, Any]) -> ResourceKey:
        return ResourceKey("Stream", str(values.get("name") or ""))

    @classmethod
    def key_from_id(cls, import_id: str) -> ResourceKey:
        if not import_id or "/" in import_id:
            raise ValueError("expected a stream name")
        return ResourceKey("Stream", import_id)


class ConsumerResource(CoreResource):
    NAME = "consumer"
    MODEL = Consumer
    IDENTITY = (
        Field("stream_name", description="The stream the consumer reads."),
        Field("durable_name", description="The consumer's durable name."),
    )
    FIELDS = CONSUMER_FIELDS
    ID_HELP = "`STREAM/CONSUMER`, e.g. `ORDERS/NEW`."
    LIMIT_FIELDS = frozenset({"max_ack_pending", "inactive_threshold"})

    @classmethod
    def key_of(cls, values: Mapping[str, Any]) -> ResourceKey:
        return ResourceKey(
            "Consumer", str(values.get("durable_name") or ""), str(values.get("stream_name") or "")
        )

    @classmethod
    def id_of(cls, key: ResourceKey) -> str:
        return f"{key.stream}/{key.name}"

    @classmethod
    def key_from_id(cls, import_id: str) -> ResourceKey:
        stream, name = _split_id(import_id, 2, "STREAM/CONSUMER")
        return ResourceKey("Consumer", name, stream)

    @classmethod
    def attribute_of(cls, path: str) -> str | None:
        # The core compares ``name`` next to ``durable_name``; both are the durable name.
        if path == "name":
            return "durable_name"
        return super().attribute_of(path)


class _BucketResource(CoreResource):
    IDENTITY = (Field("bucket", description="The bucket's name."),)

    @classmethod
    def key_of(cls, values: Mapping[str, Any]) -> ResourceKey:
        return ResourceKey(cls.MODEL.KIND, str(values.get("bucket") or ""))

    @classmethod
    def key_from_id(cls, import_id: str) -> ResourceKey:
        if not import_id or "/" in import_id:
            raise ValueError("expected a bucket name")
        return ResourceKey(cls.MODEL.KIND, import_id)


class KvBucketResource(_BucketResource):
    NAME = "kv_bucket"
    MODEL = KeyValue
    FIELDS = KV_FIELDS
    ID_HELP = "The bucket name, e.g. `config` (its stream is `KV_config`)."


class ObjectBucketResource(_BucketResource):
    NAME = "object_bucket"
    MODEL = ObjectStore
    FIELDS = BUCKET_FIELDS
    ID_HELP = "The bucket name, e.g. `assets` (its stream is `OBJ_assets`)."


class StreamTemplateResource(CoreResource):
    """A stream template: its stream config's attributes sit next to ``name`` and
    ``max_streams``, as on ``headwater_stream``. Templates can not be updated on any server,
    and deleting one deletes the streams it made, so every change is a refused replacement
    unless ``allow_replace = true``."""

    NAME = "stream_template"
    MODEL = StreamTemplate
    IDENTITY = (Field("name", description="The template's name."),)
    FIELDS = (
        Field("max_streams", "number", "How many streams the template may create.", required=True),
        *STREAM_FIELDS,
    )
    ID_HELP = "The template name."
    _TOP = frozenset({"name", "max_streams"})

    @classmethod
    def spec_input(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        flat = super().spec_input(values)
        top = {k: v for k, v in flat.items() if k in cls._TOP}
        top["config"] = {k: v for k, v in flat.items() if k not in cls._TOP}
        return top

    @classmethod
    def build_spec(cls, values: Mapping[str, Any]) -> ResourceSpec:
        try:
            return cls.MODEL.model_validate(cls.spec_input(values))
        except ValidationError as failure:
            names = [f.name for f in cls.all_fields()]
            raise spec_errors(failure, names, values, nested_root="config") from failure

    @classmethod
    def values_of(cls, spec: ResourceSpec) -> State:
        assert isinstance(spec, StreamTemplate)
        out: State = {"name": spec.name, "max_streams": spec.max_streams}
        for item in STREAM_FIELDS:
            value = getattr(spec.config, item.name)
            if item.kind == "map" and value:
                value = {k: v for k, v in value.items() if k not in CONTROL_METADATA_KEYS}
            out[item.name] = item.to_terraform(value)
        return out

    @classmethod
    def attribute_of(cls, path: str) -> str | None:
        return super().attribute_of(path.removeprefix("config."))

    @classmethod
    def key_of(cls, values: Mapping[str, Any]) -> ResourceKey:
        return ResourceKey("StreamTemplate", str(values.get("name") or ""))

    @classmethod
    def key_from_id(cls, import_id: str) -> ResourceKey:
        if not import_id or "/" in import_id:
            raise ValueError("expected a template name")
        return ResourceKey("StreamTemplate", import_id)

    def plan(
        self, diags: Diagnostics, prior: State | None, config: State, adopt: str | None = None
    ) -> tuple[State | None, list[str]]:
        if prior is None and not has_unknown(config):
            # The core refuses templates where the server has none (nats-server 2.14+).
            try:
                spec = self.spec_or_report(diags, config)
                snapshot = self.snapshot(diags, spec.key)
            except Failed:
                return None, []
            if not snapshot.live.templates_supported:
                change = self.core_change(spec, snapshot, config)
                diags.add_error(f"Can not create {spec.key}", change.refused)
                return None, []
        return super().plan(diags, prior, config, adopt)


RESOURCES: tuple[type[CoreResource], ...] = (
    StreamResource,
    ConsumerResource,
    KvBucketResource,
    ObjectBucketResource,
    StreamTemplateResource,
)
