"""The errors a command reports as one line and exit code 1, never as a traceback.

pip's habit: known failures become a message and an exit code in one place (``app.RootGroup``);
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class CliError(Exception):
    """Bad input, a refused action or an unreachable server: shown as ``Error: <message>``."""


class ApiError(CliError):
    """A JetStream API error reply: the server's description, HTTP-like code and err_code."""

    def __init__(self, code: int, err_code: int, description: str, context: str = "") -> None:
        self.code = code
        self.err_code = err_code
        self.description = description
        self.context = context
        where = f"{context}: " if context else ""
        super().__init__(f"{where}{description} (code {code}, err_code {err_code})")

    @classmethod
    def from_reply(cls, error: dict[str, object], context: str = "") -> ApiError:
        return cls(
            code=int(error.get("code", 0) or 0),  # type: ignore[call-overload]
            err_code=int(error.get("err_code", 0) or 0),  # type: ignore[call-overload]
            description=str(error.get("description", "unknown error")),
            context=context,
        )
