"""Turn `headwater validate --json` into step outputs, file annotations and a job summary.

Usage: report.py VALIDATE_JSON. The exit code is left to the validate command itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "setup"))

from github_io import annotation, append_summary, markdown_cell, set_output


def error_annotation(error: dict[str, object]) -> str:
    prefix = ": ".join(str(error[key]) for key in ("resource", "field") if error.get(key))
    message = f"{prefix}: {error['message']}" if prefix else str(error["message"])
    where = {"file": str(error["file"])}
    if error.get("line"):
        # GitHub shows the annotation on that line of the pull request's diff.
        where["line"] = str(error["line"])
    return annotation("error", message, **where, title="headwater validate")


def summary(result: dict[str, object]) -> str:
    if result["valid"]:
        resources = list(result.get("resources", []))  # type: ignore[call-overload]
        return f"## Headwater validate\n\n{len(resources)} resource(s) valid.\n"
    errors: list[dict[str, object]] = result["errors"]  # type: ignore[assignment]
    lines = [
        "## Headwater validate",
        "",
        f"{len(errors)} error(s).",
        "",
        "| File | Resource | Field | Error |",
        "|---|---|---|---|",
    ]
    for error in errors:
        cells = (error["file"], error["resource"], error["field"], error["message"])
        lines.append("| " + " | ".join(markdown_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def main(path: str) -> None:
    text = Path(path).read_text(encoding="utf-8")
    if not text.strip():
        # The command failed before it could judge the documents (reported on stderr).
        set_output("valid", "false")
        return
    result = json.loads(text)
    set_output("valid", "true" if result["valid"] else "false")
    set_output("resources", json.dumps(result.get("resources", [])))
    for error in result.get("errors", []):
        print(error_annotation(error))
    append_summary(summary(result))


if __name__ == "__main__":
    main(sys.argv[1])
