"""API errors answered as Kubernetes ``Status`` objects (``kind: Status``, ``status: Failure``).

Clients such as kopf read ``code``, ``reason`` and ``details`` from the body, not just the HTTP
status, so every error carries the full shape the real API server sends.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error that the HTTP layer turns into a Status response with the same HTTP code."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(group: str, plural: str, name: str | None) -> dict[str, Any]:
    details: dict[str, Any] = {"group": group, "kind": plural}
    if name is not None:
        details["name"] = name
    return details


def _qualified(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_qualified(group, plural)} "{name}" not found',
        _details(group, plural, name),
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(group, plural)} "{name}" already exists',
        _details(group, plural, name),
    )


def conflict(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(group, plural)} "{name}": '
        "the object has been modified; please apply your changes to the latest version "
        "and try again",
        _details(group, plural, name),
    )


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; ``causes`` are (reason, field, message) triples as in StatusDetails."""
    text = "; ".join(f"{field}: {message}" if field else message for _, field, message in causes)
    qualified = f"{kind}.{group}" if group else kind
    details: dict[str, Any] = {
        "name": name,
        "group": group,
        "kind": kind,
        "causes": [
            {"reason": reason, "field": field, "message": f"{message}"}
            for reason, field, message in causes
        ],
    }
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {text}', details)


def unprocessable(message: str) -> ApiError:
    """422 without field causes: what a failed JSON-patch ``test`` operation gets."""
    return ApiError(422, "Invalid", message)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format: {content_type}",
    )


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")
