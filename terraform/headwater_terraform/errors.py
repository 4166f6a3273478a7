"""Diagnostics: spec validation errors pointing at attributes, and server errors verbatim."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from nats.errors import Error as NatsError
from nats.js.errors import Error as NatsJetStreamError
from pydantic import ValidationError
from tf.utils import Diagnostics

from headwater.control import api

AttributePath = list[Any]

_WORD = re.compile(r"[a-z][a-z0-9_]*")


class SpecErrors(Exception):
    """Invalid attribute values: (attribute path, message) pairs."""

    def __init__(
        self, problems: list[tuple[AttributePath, str]], located: list[bool] | None = None
    ) -> None:
        super().__init__("; ".join(message for _path, message in problems))
        self.problems = problems
        self.located = located if located is not None else [True] * len(problems)
        """Per problem: the value of one attribute is wrong (else: a combination is)."""

    def only_located(self, skip: Collection[str]) -> SpecErrors:
        """The problems with a value of their own attribute, leaving out ``skip``'s."""
        kept = [
            (path, message)
            for (path, message), located in zip(self.problems, self.located, strict=True)
            if located and path and path[0] not in skip
        ]
        return SpecErrors(kept)

    def report(self, diags: Diagnostics, type_name: str) -> None:
        for path, message in self.problems:
            where = ".".join(str(step[0]) if isinstance(step, tuple) else step for step in path)
            summary = f"Invalid {where}" if where else f"Invalid {type_name}"
            diags.add_error(summary, message, path=path or None)


def spec_errors(
    failure: ValidationError,
    attributes: Collection[str],
    configured: Mapping[str, Any],
    nested_root: str = "",
) -> SpecErrors:
    """Pydantic errors as attribute paths. A model-level error (an invalid combination) has
    no location; it points at the first configured attribute its message names."""
    problems: list[tuple[AttributePath, str]] = []
    located: list[bool] = []
    for item in failure.errors():
        message = str(item["msg"]).removeprefix("Value error, ")
        loc = list(item["loc"])
        if nested_root and loc and loc[0] == nested_root:
            loc = loc[1:]
        if loc and loc[0] == "durable_name" and "durable_name" not in attributes:
            loc = []
        path = _path(loc) if loc and str(loc[0]) in attributes else []
        located.append(bool(path))
        if not path:
            named = named_attribute(message, attributes, configured)
            path = [named] if named else []
        problems.append((path, message))
    return SpecErrors(problems, located)


def _path(loc: list[Any]) -> AttributePath:
    path: AttributePath = []
    for step in loc:
        if isinstance(step, int):
            path.append((step,))
        elif isinstance(step, str) and not step.startswith("function-"):
            path.append(step)
    return path


def named_attribute(
    message: str, attributes: Collection[str], configured: Mapping[str, Any]
) -> str | None:
    """The first attribute the message names that the configuration sets (else any named)."""
    named = [word for word in _WORD.findall(message) if word in attributes]
    for word in named:
        if configured.get(word) is not None:
            return word
    return named[0] if named else None


def server_error(diags: Diagnostics, action: str, error: Exception) -> None:
    """A failed server call: the server's own text, and nothing else invented."""
    if isinstance(error, api.ApiError):
        diags.add_error(f"{action} failed: {error.description}", str(error))
    elif isinstance(error, api.ApiUnavailable):
        diags.add_error(f"{action} failed: the JetStream API did not answer", str(error))
    elif isinstance(error, NatsJetStreamError):
        diags.add_error(f"{action} failed: {error}", str(error))
    elif isinstance(error, ConnectionError | OSError | NatsError):
        # nats-py's own errors here come from connecting: refused credentials, TLS, no server.
        diags.add_error(f"{action} failed: can not connect", str(error) or type(error).__name__)
    elif isinstance(error, TimeoutError):
        diags.add_error(f"{action} failed: timed out", str(error) or "no reply in time")
    else:
        diags.add_error(f"{action} failed", f"{type(error).__name__}: {error}")
