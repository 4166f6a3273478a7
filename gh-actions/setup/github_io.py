"""GitHub Actions' runner files and workflow commands, for the actions' Python helpers.

Only the standard library: the helpers run with whatever Python headwater was installed into.
"""

from __future__ import annotations

import os
import secrets


def set_output(name: str, value: str) -> None:
    """Append a step output to $GITHUB_OUTPUT; the delimiter form keeps multi-line values."""
    delimiter = f"HEADWATER_EOF_{secrets.token_hex(12)}"
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as stream:
        stream.write(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")


def append_summary(markdown: str) -> None:
    """Append markdown to the job summary, when the runner gives one."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(markdown if markdown.endswith("\n") else markdown + "\n")


def _escape_data(text: str) -> str:
    # The escapes the runner undoes in a workflow command's message.
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, message: str, **properties: str) -> str:
    """A workflow command such as ``::error file=a.yaml,title=x::message``."""
    props = ",".join(f"{key}={_escape_property(value)}" for key, value in properties.items())
    head = f"::{level} {props}" if props else f"::{level}"
    return f"{head}::{_escape_data(message)}"


def markdown_cell(text: object) -> str:
    """Text for one markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", "<br>")
