"""The two patch formats kopf sends: JSON merge patch (RFC 7386) and JSON patch (RFC 6902)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import jsonpointer

from . import errors

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: dict[str, Any], operations: Any) -> dict[str, Any]:
    """RFC 6902. A failed ``test`` (kopf's resourceVersion guard) or a bad path is a 422."""
    if not isinstance(operations, list):
        raise errors.bad_request("a JSON patch must be a list of operations")
    try:
        return jsonpatch.JsonPatch(operations).apply(target)
    except jsonpatch.JsonPatchTestFailed as failed:
        raise errors.unprocessable(
            f"the server rejected our request due to an error in our "
            f"request: testing value failed: {failed}"
        ) from None
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as bad:
        raise errors.unprocessable(
            f"the server rejected our request due to an error in our request: {bad}"
        ) from None
    except (KeyError, TypeError) as bad:
        raise errors.bad_request(f"invalid JSON patch: {bad!r}") from None


def apply_patch(
    target: dict[str, Any], content_type: str, body: Any, *, custom: bool
) -> dict[str, Any]:
    media = content_type.split(";", 1)[0].strip()
    if media == MERGE_PATCH:
        if not isinstance(body, dict):
            raise errors.bad_request("a merge patch must be a JSON object")
        return merge_patch(target, body)
    if media == JSON_PATCH:
        return json_patch(target, body)
    # Custom resources have no patch strategy, so the real server refuses strategic merge for
    # them; for the built-ins the fake treats it as a merge patch (no list-merge keys).
    if media == STRATEGIC_MERGE_PATCH and not custom and isinstance(body, dict):
        return merge_patch(target, body)
    raise errors.unsupported_media_type(media)
