"""The test runner itself: GitHub's expression rules and a composite action's step semantics,
so the action tests can trust what it reports."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import pytest

from support.actions_expressions import ExpressionError, Status, condition, evaluate, interpolate
from support.actions_runner import ActionError, parse_command_file, run_action

CONTEXT = {
    "inputs": {"tls-cert": "c.pem", "flag": "true", "empty": "", "n": "2"},
    "steps": {"plan": {"outputs": {"changes": "true", "exit-code": "2"}}},
    "github": {"event": {"labels": ["a", "b"]}},
}


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("inputs.tls-cert", "c.pem"),
        ("inputs['tls-cert']", "c.pem"),
        ("INPUTS.Flag", "true"),
        ("inputs.missing", None),
        ("steps.plan.outputs.exit-code == 2", True),
        ("steps.plan.outputs.changes == 'TRUE'", True),
        ("inputs.flag == true", False),  # 'true' is NaN as a number, true is 1
        ("inputs.empty == 0", True),
        ("inputs.empty || 'fallback'", "fallback"),
        ("inputs.flag && 'yes'", "yes"),
        ("!inputs.empty", True),
        ("inputs.n > 1 && inputs.n < 3", True),
        ("contains(github.event.labels, 'B')", True),
        ("startsWith('Headwater', 'head')", True),
        ("format('{0}-{1}{{x}}', 'a', 1)", "a-1{x}"),
        ("fromJSON('{\"seq\": 7}').seq", 7),
        ("join(github.event.labels, '+')", "a+b"),
        ("(1 == 1) && !(2 < 1)", True),
        ("null == ''", True),
    ],
)
def test_expressions(expression: str, value: object) -> None:
    assert evaluate(expression, CONTEXT) == value


def test_interpolation_and_conditions() -> None:
    text = "cert=${{ inputs.tls-cert }} none=${{ inputs.missing }} b=${{ 1 == 1 }} s=${{ '}}' }}"
    assert interpolate(text, CONTEXT) == "cert=c.pem none= b=true s=}}"
    failed = Status(failed=True)
    assert condition(None, CONTEXT, Status())
    assert not condition(None, CONTEXT, failed)
    assert not condition("inputs.flag == 'true'", CONTEXT, failed)  # success() && ... implied
    assert condition("${{ always() && inputs.flag == 'true' }}", CONTEXT, failed)
    assert condition("failure()", CONTEXT, failed)
    assert not condition("${{ inputs.empty }}", CONTEXT, Status())
    with pytest.raises(ExpressionError):
        evaluate("unknown.context", CONTEXT)
    with pytest.raises(ExpressionError):
        evaluate("unknownFunction('x')", CONTEXT)


def test_hash_files(tmp_path: Path) -> None:
    """GitHub's hashFiles: SHA-256 of the matching files' SHA-256s, "" when none match."""
    (tmp_path / "a.yml").write_text("one")
    (tmp_path / "b.yml").write_text("two")
    context = {"github": {"workspace": str(tmp_path)}}
    expected = hashlib.sha256(
        hashlib.sha256(b"one").digest() + hashlib.sha256(b"two").digest()
    ).hexdigest()
    assert evaluate("hashFiles('*.yml')", context) == expected
    assert evaluate("hashFiles('*.txt')", context) == ""


def test_command_files() -> None:
    text = "a=1\nmulti<<EOF_1\nline 1\n\nline 3\nEOF_1\nb=x=y\n"
    assert parse_command_file(text) == {"a": "1", "multi": "line 1\n\nline 3", "b": "x=y"}
    with pytest.raises(ActionError, match="no closing delimiter"):
        parse_command_file("m<<END\nvalue\n")


ACTION = """\
name: runner check
description: exercises the runner
inputs:
  word:
    description: a word
    required: true
  fail:
    description: fail the second step
    default: 'false'
outputs:
  greeting:
    description: from step one
    value: ${{ steps.one.outputs.greeting }}
  after:
    description: from step four
    value: ${{ steps.four.outputs.seen }}
runs:
  using: composite
  steps:
    - id: one
      shell: bash
      env:
        WORD: ${{ inputs.word }}
      run: |
        printf 'greeting<<END\\nhello\\n%s\\nEND\\n' "$WORD" >>"$GITHUB_OUTPUT"
        echo "FROM_ONE=set" >>"$GITHUB_ENV"
        echo "# Summary of one" >>"$GITHUB_STEP_SUMMARY"
        echo "::warning file=a.yaml,title=t::careful%0Anow"
    - id: two
      shell: bash
      run: |
        false
        echo "not reached"
      if: inputs.fail == 'true'
    - id: three
      shell: bash
      run: echo "skipped after a failure"
    - id: four
      if: always()
      shell: bash
      run: |
        echo "seen=$FROM_ONE in $(basename "$PWD") ${{ steps.two.outcome }}" >>"$GITHUB_OUTPUT"
        echo "action at $GITHUB_ACTION_PATH" >/dev/null
"""


@pytest.fixture
def action_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "action"
    directory.mkdir()
    (directory / "action.yml").write_text(textwrap.dedent(ACTION))
    return directory


def test_a_passing_run(action_dir: Path, tmp_path: Path) -> None:
    run = run_action(action_dir, {"word": "world"}, workspace=tmp_path)
    assert run.ok
    after = f"set in {tmp_path.name} skipped"
    assert run.outputs == {"greeting": "hello\nworld", "after": after}
    assert [s.outcome for s in run.steps] == ["success", "skipped", "success", "success"]
    assert run.summary == "# Summary of one\n"
    warning = run.annotations[0]
    assert (warning.level, warning.message) == ("warning", "careful\nnow")
    assert warning.properties == {"file": "a.yaml", "title": "t"}


def test_a_failing_step_skips_the_rest_but_always(action_dir: Path, tmp_path: Path) -> None:
    run = run_action(action_dir, {"word": "x", "fail": "true"}, workspace=tmp_path)
    assert not run.ok
    assert [s.outcome for s in run.steps] == ["success", "failure", "skipped", "success"]
    assert run.step("two").exit_code == 1 and "not reached" not in run.step("two").stdout
    assert run.outputs["after"].endswith(" failure")


def test_inputs_are_checked(action_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ActionError, match="required"):
        run_action(action_dir, {}, workspace=tmp_path)
    with pytest.raises(ActionError, match="unexpected input"):
        run_action(action_dir, {"word": "x", "wrod": "y"}, workspace=tmp_path)
