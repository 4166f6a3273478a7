"""GitOps commands: ``validate``, ``plan``, ``diff``, ``apply`` and ``export``.

Exit codes a pipeline can use (headwater/cli/exitcodes.py): ``plan`` and ``diff`` 0 no
changes, 2 changes present, 1 error; ``apply`` 0 success, 1 error; ``validate`` 0 valid,
1 invalid. A plan with a refused change (a destructive replace not allowed, another owner's
resource) is an error for all three, and ``diff --json`` is ``plan --json`` narrowed to drift.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
import yaml
from nats.aio.client import Client
from rich.console import Console
from rich.progress import Progress

from headwater.cli import exitcodes
from headwater.cli.context import CliContext, current
from headwater.control import render
from headwater.control.api import ApiError, ApiUnavailable
from headwater.control.apply import ApplyRefused, ApplyReport, Result, apply_plan
from headwater.control.documents import DocumentErrors, Resource, load_documents
from headwater.control.models import ADOPT_ANNOTATION, MANAGED_BY_VALUE
from headwater.control.plan import REPLACE_HINT, Plan, PlanError
from headwater.control.reconcile import export_documents, plan_resources

T = TypeVar("T")

FILES_HELP = "YAML file or directory of documents (repeatable)."
JSON_HELP = "Print JSON (same as the global --json)."
DEFAULT_OWNER = "cli"
"""Who ``headwater apply`` is when not told: never the name Terraform, the operator or the
GitHub Actions write, so a prune here never deletes what they manage (docs/CONTROL.md)."""
OWNER_OPTION = typer.Option(
    DEFAULT_OWNER,
    "--owner",
    envvar="HEADWATER_OWNER",
    help="Who manages what these documents create (recorded as headwater.io/managed-by); "
    "prune deletes only this owner's resources. One name per repository or directory.",
)
ADOPT_HINT = f'run with --adopt, or annotate the document {ADOPT_ANNOTATION}: "true"'
ADOPT_OPTION = typer.Option(
    False, "--adopt", help="Take over resources another owner manages (shown in the plan)."
)


def _consoles() -> tuple[Console, Console]:
    return Console(), Console(stderr=True, soft_wrap=True)


def _load(files: list[str], err: Console, cli: CliContext) -> list[Resource]:
    try:
        return load_documents(files)
    except DocumentErrors as failure:
        if cli.json_output:
            payload = {"valid": False, "errors": [e.to_dict() for e in failure.errors]}
            typer.echo(json.dumps(payload, indent=2))
        else:
            for error in failure.errors:
                err.print(f"Error: {error}", highlight=False, markup=False)
        raise typer.Exit(exitcodes.ERROR) from None


def _run(cli: CliContext, err: Console, body: Callable[[Client], Awaitable[T]]) -> T:
    """Run against the server; connection and API failures become exit code 1."""
    try:
        return cli.run(body)
    except (PlanError, ApplyRefused) as failure:
        err.print(f"Error: {failure}", highlight=False, markup=False)
    except (ApiError, ApiUnavailable) as failure:
        err.print(f"Error: JetStream API: {failure}", highlight=False, markup=False)
    except (OSError, TimeoutError) as failure:
        err.print(f"Error: can not reach the server: {failure}", highlight=False, markup=False)
    except Exception as failure:
        # nats-py raises its own types (auth, no servers); the CLI's context raises its own
        # error type for connection problems. Anything else is a bug and keeps its traceback.
        module = type(failure).__module__
        if not module.startswith(("nats", "headwater.cli")):
            raise
        err.print(f"Error: {failure}", highlight=False, markup=False)
    raise typer.Exit(exitcodes.ERROR)


def validate(
    ctx: typer.Context,
    files: list[str] = typer.Option(..., "-f", "--file", help=FILES_HELP),
    json_flag: bool = typer.Option(False, "--json", "-j", help=JSON_HELP),
) -> None:
    """Check documents offline: schema, names, units, impossible combinations."""
    cli = _cli(ctx, json_flag)
    out, err = _consoles()
    resources = _load(files, err, cli)
    if cli.json_output:
        payload = {"valid": True, "resources": [str(r.key) for r in resources]}
        typer.echo(json.dumps(payload, indent=2))
    else:
        out.print(f"{len(resources)} resource(s) valid.")


def _cli(ctx: typer.Context, json_flag: bool) -> CliContext:
    """The invocation's context; ``--json`` after the command counts like before it."""
    cli = current(ctx)
    if json_flag and not cli.json_output:
        cli = dataclasses.replace(cli, json_output=True)
    return cli


def _plan(
    cli: CliContext, files: list[str], owner: str, prune: bool, allow_replace: bool, adopt: bool
) -> tuple[CliContext, Plan]:
    _out, err = _consoles()
    resources = _load(files, err, cli)
    owner = _owner(owner, err)

    async def body(nc: Client) -> Plan:
        return await _plan_as(nc, resources, owner, prune, allow_replace, adopt)

    return cli, _run(cli, err, body)


async def _plan_as(
    nc: Client,
    resources: list[Resource],
    owner: str,
    prune: bool,
    allow_replace: bool,
    adopt: bool,
) -> Plan:
    plan, _live = await plan_resources(
        nc,
        resources,
        owner=owner,
        prune=prune,
        allow_replace=allow_replace,
        adopt=adopt,
        adopt_hint=ADOPT_HINT,
        replace_hint=f"{REPLACE_HINT} or --allow-replace",
    )
    return plan


def _owner(owner: str, err: Console) -> str:
    owner = owner.strip()
    if not owner or owner == MANAGED_BY_VALUE:
        err.print(
            f"Error: --owner {owner!r} is not an owner's name: use one per repository or "
            "directory, such as github:org/repo",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(exitcodes.ERROR)
    return owner


def _plan_exit(plan: Plan) -> None:
    if plan.refusals:
        raise typer.Exit(exitcodes.ERROR)
    raise typer.Exit(exitcodes.CHANGES if plan.has_changes else exitcodes.OK)


def plan(
    ctx: typer.Context,
    files: list[str] = typer.Option(..., "-f", "--file", help=FILES_HELP),
    prune: bool = typer.Option(
        False, "--prune", help="Also delete owned resources no document names."
    ),
    allow_replace: bool = typer.Option(
        False, "--allow-replace", help="Allow destructive replaces for every resource."
    ),
    markdown: Path | None = typer.Option(
        None, "--markdown", help="Append the plan as markdown to FILE ($GITHUB_STEP_SUMMARY)."
    ),
    show_unchanged: bool = typer.Option(False, "--show-unchanged", help="List no-ops too."),
    owner: str = OWNER_OPTION,
    adopt: bool = ADOPT_OPTION,
    json_flag: bool = typer.Option(False, "--json", "-j", help=JSON_HELP),
) -> None:
    """Show what apply would change. Exit 0 no changes, 2 changes, 1 error."""
    cli, result = _plan(_cli(ctx, json_flag), files, owner, prune, allow_replace, adopt)
    if markdown is not None:
        with markdown.open("a", encoding="utf-8") as stream:
            stream.write(render.plan_markdown(result))
    if cli.json_output:
        typer.echo(render.plan_json(result))
    else:
        render.print_plan(result, Console(), show_noop=show_unchanged)
    _plan_exit(result)


def diff(
    ctx: typer.Context,
    files: list[str] = typer.Option(..., "-f", "--file", help=FILES_HELP),
    prune: bool = typer.Option(False, "--prune", help="Include deletes of owned resources."),
    owner: str = OWNER_OPTION,
    json_flag: bool = typer.Option(False, "--json", "-j", help=JSON_HELP),
) -> None:
    """Show live vs desired, field by field. Exit 0 no changes, 2 changes, 1 error."""
    cli, result = _plan(_cli(ctx, json_flag), files, owner, prune, False, False)
    if cli.json_output:
        # plan's JSON, its changes narrowed to the drift (plan and diff read alike).
        payload = result.to_dict()
        payload["changes"] = [change.to_dict() for change in result.ordered() if change.drift]
        typer.echo(json.dumps(payload, indent=2))
    else:
        out = Console()
        for change in result.ordered():
            if not change.drift:
                continue
            out.print(
                f"{render.SYMBOL[change.action]} {change.key} ({change.action.value})",
                highlight=False,
            )
            for line in render.field_lines(change) + render.notes(change):
                out.print(f"    {line}", highlight=False)
        if not result.drift:
            out.print("No differences.")
    _plan_exit(result)


def apply(
    ctx: typer.Context,
    files: list[str] = typer.Option(..., "-f", "--file", help=FILES_HELP),
    prune: bool = typer.Option(False, "--prune", help="Delete owned resources no document names."),
    allow_replace: bool = typer.Option(
        False, "--allow-replace", help="Allow destructive replaces for every resource."
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    markdown: Path | None = typer.Option(
        None, "--markdown", help="Append the plan and results as markdown to FILE."
    ),
    owner: str = OWNER_OPTION,
    adopt: bool = ADOPT_OPTION,
    json_flag: bool = typer.Option(False, "--json", "-j", help=JSON_HELP),
) -> None:
    """Make the server match the documents. Exit 0 success, 1 error."""
    cli = _cli(ctx, json_flag)
    out, err = _consoles()
    resources = _load(files, err, cli)
    owner = _owner(owner, err)

    async def body(nc: Client) -> tuple[Plan, ApplyReport | None]:
        plan = await _plan_as(nc, resources, owner, prune, allow_replace, adopt)
        if plan.refusals:
            return plan, None
        if not plan.has_changes:
            return plan, ApplyReport()
        if not cli.json_output:
            render.print_plan(plan, out)
        if not yes and not _confirm():
            return plan, None
        return plan, await _apply_with_progress(nc, plan, out, cli.json_output)

    plan_result, report = _run(cli, err, body)
    if plan_result.refusals:
        _refused(plan_result, markdown, cli.json_output, err)
    if report is None:
        err.print("Apply cancelled; nothing was changed.")
        raise typer.Exit(exitcodes.ERROR)
    if markdown is not None:
        # The GitHub apply action's job summary: what was planned, then what happened.
        with markdown.open("a", encoding="utf-8") as stream:
            stream.write(render.plan_markdown(plan_result) + "\n" + render.report_markdown(report))
    if cli.json_output:
        payload: dict[str, Any] = {"plan": plan_result.to_dict(), "apply": report.to_dict()}
        typer.echo(json.dumps(payload, indent=2, default=str))
    elif not report.results:
        out.print("No changes. The server matches the documents.")
    else:
        out.print(render.report_table(report), soft_wrap=True)
        out.print(render.report_summary(report))
    raise typer.Exit(exitcodes.OK if report.ok else exitcodes.ERROR)


def _refused(plan: Plan, markdown: Path | None, json_output: bool, err: Console) -> None:
    """Nothing was applied: say why on stderr, and show the plan wherever a successful apply
    would report (the job summary, the JSON with ``apply: null``), then exit 1."""
    if markdown is not None:
        with markdown.open("a", encoding="utf-8") as stream:
            stream.write(render.plan_markdown(plan))
    if json_output:
        typer.echo(json.dumps({"plan": plan.to_dict(), "apply": None}, indent=2, default=str))
    else:
        render.print_plan(plan, Console())
    err.print(f"Error: {ApplyRefused(plan)}", highlight=False, markup=False)
    raise typer.Exit(exitcodes.ERROR)


def _confirm() -> bool:
    if not sys.stdin.isatty():
        typer.echo("apply needs --yes when no terminal is attached", err=True)
        return False
    return typer.confirm("Apply these changes?", default=False)


async def _apply_with_progress(nc: Client, plan: Plan, out: Console, quiet: bool) -> ApplyReport:
    if quiet or not out.is_terminal:
        return await apply_plan(nc, plan)
    with Progress(console=out, transient=True) as progress:
        task = progress.add_task("Applying", total=len(plan.changes))

        def advance(result: Result) -> None:
            progress.update(task, advance=1, description=f"Applying {result.change.key}")

        return await apply_plan(nc, plan, on_result=advance)


def export(
    ctx: typer.Context,
    output: Path | None = typer.Option(None, "-o", "--output", help="Write to FILE."),
    json_flag: bool = typer.Option(False, "--json", "-j", help=JSON_HELP),
) -> None:
    """Write the live state as YAML documents (JSON with --json)."""
    cli = _cli(ctx, json_flag)
    _out, err = _consoles()
    documents = _run(cli, err, export_documents)
    if cli.json_output:
        text = json.dumps(documents, indent=2)
    else:
        text = yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False)
    if output is not None:
        output.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    else:
        typer.echo(text, nl=not text.endswith("\n"))


def register(root: typer.Typer) -> None:
    """Add the GitOps commands to the root ``headwater`` command."""
    root.command("validate")(validate)
    root.command("plan")(plan)
    root.command("diff")(diff)
    root.command("apply")(apply)
    root.command("export")(export)
