"""Print `headwater verify --json` as markdown for the job summary.

Usage: summary.py VERIFY_JSON >> "$GITHUB_STEP_SUMMARY"
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "setup"))

from github_io import markdown_cell

SHOWN_FINDINGS = 50
"""The summary lists this many findings; the json output and --report keep all of them."""


def findings_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    found = [finding for report in result["reports"] for finding in report["findings"]]
    if result.get("comparison"):
        found += result["comparison"]["findings"]
    return found


def render(result: dict[str, Any]) -> str:
    verdict = "clean" if result["ok"] else f"{result['findings']} finding(s)"
    lines = ["## Headwater verify", "", f"{result['backups']} backup(s) verified: {verdict}.", ""]
    lines += ["| Backup | Stream | Messages | Consumers | Findings |", "|---|---|---|---|---|"]
    for report in result["reports"]:
        cells = (
            report["backup"],
            report["stream"],
            report["messages"],
            report["consumers"],
            len(report["findings"]),
        )
        lines.append("| " + " | ".join(markdown_cell(cell) for cell in cells) + " |")
    comparison = result.get("comparison")
    if comparison:
        same = "identical" if comparison["identical"] else "different"
        lines += ["", f"Comparison of `{comparison['a']}` and `{comparison['b']}`: {same}."]
    found = findings_of(result)
    if found:
        lines += ["", "| Backup | Kind | Sequence | Detail |", "|---|---|---|---|"]
        for finding in found[:SHOWN_FINDINGS]:
            seq = "" if finding.get("seq") is None else finding["seq"]
            cells = (finding["backup"], finding["kind"], seq, finding["detail"])
            lines.append("| " + " | ".join(markdown_cell(cell) for cell in cells) + " |")
        if len(found) > SHOWN_FINDINGS:
            lines += ["", f"{len(found) - SHOWN_FINDINGS} more in the json output."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))))
