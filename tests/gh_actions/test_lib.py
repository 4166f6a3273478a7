"""gh-actions/setup/lib.sh, the helpers every action's step sources: outputs that survive
any content, and the plan comment cut to GitHub's size limit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gh_actions.locations import ACTIONS

from support.actions_runner import parse_command_file

LIB = ACTIONS / "setup" / "lib.sh"


def bash(script: str, tmp_path: Path, **env: str) -> str:
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", f'source "{LIB}"\n{script}'],
        env={"PATH": os.environ["PATH"], "RUNNER_TEMP": str(tmp_path), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def test_outputs_keep_any_content(tmp_path: Path) -> None:
    output = tmp_path / "output"
    tricky = "line 1\nEOF\nname=value\n\n  spaced  \nHEADWATER_EOF_"
    (tmp_path / "value.txt").write_text(tricky + "\n")
    bash(
        'hw_output one "$VALUE"; hw_output_file two "$RUNNER_TEMP/value.txt"; hw_output three ""',
        tmp_path,
        VALUE=tricky,
        GITHUB_OUTPUT=str(output),
    )
    assert parse_command_file(output.read_text()) == {"one": tricky, "two": tricky, "three": ""}


def test_the_comment_starts_with_the_marker_and_fits(tmp_path: Path) -> None:
    short = tmp_path / "short.md"
    short.write_text("## Headwater plan\n\nNo changes.\n")
    text = bash(f'hw_comment_markdown "{short}"', tmp_path)
    assert text == "<!-- headwater-plan -->\n## Headwater plan\n\nNo changes."

    long = tmp_path / "long.md"
    rows = [f"| `+` | **create** | `Stream/S{n:05}` | | |" for n in range(3000)]
    long.write_text("## Headwater plan\n\n" + "\n".join(rows) + "\n")
    assert long.stat().st_size > 65536
    text = bash(f'hw_comment_markdown "{long}"', tmp_path)
    assert len(text) < 60200
    body, note = text.rsplit("\n\n", 1)
    assert note.startswith("*The plan is too long for a comment and was cut")
    assert body.splitlines()[-1].endswith("| | |")  # cut at a whole table row


def test_file_arguments(tmp_path: Path) -> None:
    script = 'hw_file_args; for a in "${HW_FILE_ARGS[@]}"; do echo "$a"; done'
    out = bash(script, tmp_path, HW_FILES=" a.yaml\n  dir/ \tb.yml\n")
    assert out.split() == ["-f", "a.yaml", "-f", "dir/", "-f", "b.yml"]
