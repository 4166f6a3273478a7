"""The tfplugin6 service: tf's servicer, with the resource lifecycle routed to our resources.

tf's own planning decides replacements from static ``requires_replace`` flags and never shows
a resource the configuration (only the proposed state); a plan here must be what the core
decides, from the configuration, against the live server. So the lifecycle calls (validate,
plan, apply, read, import, upgrade) hand the raw configuration and states to the resource
classes; tf keeps the schema, provider configuration and data source calls.

Private state carries an adoption (``ownership``) from ``terraform import`` through refresh
and plan to the apply that writes the provider's marker, which clears it. Only the core's
resources use it; ``headwater_kv_entry`` has no owner.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

import grpc
from msgpack import ExtType
from tf.gen import tfplugin_pb2 as pb
from tf.provider import ProviderServicer
from tf.types import Unknown
from tf.utils import Diagnostics, read_dynamic_value, to_dynamic_value

from headwater_terraform.assets import CoreResource
from headwater_terraform.ownership import adopting


def _decode(value: pb.DynamicValue) -> dict[str, Any] | None:
    decoded = _unknowns(read_dynamic_value(value))
    return decoded if isinstance(decoded, dict) else None


UNKNOWN_EXTENSIONS = (0, 12)
"""cty's msgpack extension codes: 0 unknown, 12 unknown with refinements ("a string starting
with S"); tf recognizes only an empty extension 0."""


def _unknowns(value: Any) -> Any:
    """Every unknown value as tf's ``Unknown``."""
    if isinstance(value, ExtType):
        return Unknown if value.code in UNKNOWN_EXTENSIONS else value
    if isinstance(value, dict):
        return {key: _unknowns(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unknowns(item) for item in value]
    return value


def _attribute_path(name: str) -> pb.AttributePath:
    return pb.AttributePath(steps=[pb.AttributePath.Step(attribute_name=name)])


def _internal_error(diags: Diagnostics, operation: str) -> None:
    # A bug must not take the provider (and Terraform's run) down: report it as a diagnostic.
    traceback.print_exc(file=sys.stderr)
    error = sys.exc_info()[1]
    diags.add_error(f"{operation}: internal error", f"{type(error).__name__}: {error}")


class HeadwaterServicer(ProviderServicer):
    def _resource(self, type_name: str) -> Any:
        return self.app.new_resource(self._get_res_cls(type_name))

    def _complete(self, type_name: str, state: dict[str, Any] | None) -> dict[str, Any] | None:
        """Every schema attribute present (tf encodes only the keys it is given)."""
        if state is None:
            return None
        return {name: state.get(name) for name in self._get_res_attrs(type_name)}

    def ValidateResourceConfig(
        self, request: pb.ValidateResourceConfig.Request, context: grpc.ServicerContext
    ) -> pb.ValidateResourceConfig.Response:
        diags = Diagnostics()
        try:
            config = _decode(request.config) or {}
            self._resource(request.type_name).validate(diags, request.type_name, config)
        except Exception:  # reported as a diagnostic
            _internal_error(diags, "Validate")
        return pb.ValidateResourceConfig.Response(diagnostics=diags.to_pb())

    def UpgradeResourceState(
        self, request: pb.UpgradeResourceState.Request, context: grpc.ServicerContext
    ) -> pb.UpgradeResourceState.Response:
        diags = Diagnostics()
        state: dict[str, Any] = {}
        try:
            raw = json.loads(request.raw_state.json) if request.raw_state.json else {}
            resource = self._resource(request.type_name)
            state = resource.upgrade(diags, request.version, raw)
        except Exception:  # reported as a diagnostic
            _internal_error(diags, "Upgrade state")
        return pb.UpgradeResourceState.Response(
            upgraded_state=to_dynamic_value(self._complete(request.type_name, state)),
            diagnostics=diags.to_pb(),
        )

    def ReadResource(
        self, request: pb.ReadResource.Request, context: grpc.ServicerContext
    ) -> pb.ReadResource.Response:
        diags = Diagnostics()
        prior = _decode(request.current_state)
        state = prior
        private = request.private
        try:
            if prior is not None:
                resource = self._resource(request.type_name)
                state = resource.read(diags, prior)
                if isinstance(resource, CoreResource):
                    private = resource.read_private(prior, state, private)
        except Exception:  # reported as a diagnostic
            _internal_error(diags, "Refresh")
            state = prior
        return pb.ReadResource.Response(
            new_state=to_dynamic_value(self._complete(request.type_name, state)),
            diagnostics=diags.to_pb(),
            private=private,
        )

    def PlanResourceChange(
        self, request: pb.PlanResourceChange.Request, context: grpc.ServicerContext
    ) -> pb.PlanResourceChange.Response:
        diags = Diagnostics()
        prior = _decode(request.prior_state)
        proposed = _decode(request.proposed_new_state)
        if proposed is None:
            # Destroy: nothing to decide; the apply deletes (an adoption still counts).
            return pb.PlanResourceChange.Response(
                planned_state=to_dynamic_value(None), planned_private=request.prior_private
            )
        config = _decode(request.config) or {}
        planned: dict[str, Any] | None = None
        forcing: list[str] = []
        try:
            resource = self._resource(request.type_name)
            if isinstance(resource, CoreResource):
                adopt = adopting(request.prior_private)
                planned, forcing = resource.plan(diags, prior, config, adopt)
            else:
                planned, forcing = resource.plan(diags, prior, config)
        except Exception:  # reported as a diagnostic
            _internal_error(diags, "Plan")
        if planned is None:
            return pb.PlanResourceChange.Response(diagnostics=diags.to_pb())
        return pb.PlanResourceChange.Response(
            planned_state=to_dynamic_value(self._complete(request.type_name, planned)),
            requires_replace=[_attribute_path(name) for name in forcing],
            planned_private=request.prior_private,
            diagnostics=diags.to_pb(),
        )

    def ApplyResourceChange(
        self, request: pb.ApplyResourceChange.Request, context: grpc.ServicerContext
    ) -> pb.ApplyResourceChange.Response:
        diags = Diagnostics()
        prior = _decode(request.prior_state)
        planned = _decode(request.planned_state)
        config = _decode(request.config) or {}
        state = prior
        owned: dict[str, Any] = {}
        try:
            resource = self._resource(request.type_name)
            if isinstance(resource, CoreResource):
                owned["adopt"] = adopting(request.planned_private)
            if prior is None and planned is not None:
                state = resource.create(diags, planned, config)
            elif planned is None and prior is not None:
                resource.delete(diags, prior, **owned)
                state = prior if diags.has_errors() else None
            elif prior is not None and planned is not None:
                state = resource.update(diags, prior, planned, config, **owned)
        except Exception:  # reported as a diagnostic; the state is unchanged
            _internal_error(diags, "Apply")
            state = prior
        # A successful apply wrote this provider's marker: the adoption is done. A failed
        # one keeps it for the next try.
        private = request.planned_private if diags.has_errors() else b""
        return pb.ApplyResourceChange.Response(
            new_state=to_dynamic_value(self._complete(request.type_name, state)),
            private=private,
            diagnostics=diags.to_pb(),
        )

    def ImportResourceState(
        self, request: pb.ImportResourceState.Request, context: grpc.ServicerContext
    ) -> pb.ImportResourceState.Response:
        diags = Diagnostics()
        state = None
        private = b""
        try:
            resource = self._resource(request.type_name)
            state = resource.import_(diags, request.id)
            if state is not None and isinstance(resource, CoreResource):
                private = resource.import_private(state)
        except Exception:  # reported as a diagnostic
            _internal_error(diags, "Import")
        imported = []
        if state is not None and not diags.has_errors():
            imported.append(
                pb.ImportResourceState.ImportedResource(
                    type_name=request.type_name,
                    state=to_dynamic_value(self._complete(request.type_name, state)),
                    private=private,
                )
            )
        return pb.ImportResourceState.Response(
            imported_resources=imported, diagnostics=diags.to_pb()
        )
