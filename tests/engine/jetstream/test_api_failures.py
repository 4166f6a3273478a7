"""The reply the router sends for an exception no handler turned into an API error."""

from __future__ import annotations

from headwater.server.jetstream.api import unexpected_error


def test_unexpected_errors_use_the_operation_family() -> None:
    err = unexpected_error("stream_create", ValueError("embedded null byte"))
    assert err.to_dict() == {"code": 500, "err_code": 10049, "description": "embedded null byte"}
    assert unexpected_error("consumer_create", OSError("disk full")).err_code == 10012
    assert unexpected_error("stream_update", RuntimeError()).description == "RuntimeError"
    assert unexpected_error("stream_info", KeyError("x")).err_code == 10051
