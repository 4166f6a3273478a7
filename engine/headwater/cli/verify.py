"""``headwater verify PATH...``: verify backups offline with the Spark job.

The command is a thin shell over :mod:`headwater.verify.job` (the same job ``spark-submit``
runs on a cluster): it picks the master, prints the result and sets the exit code (0 clean,
1 on any finding or error). Progress (what is read, tasks done) goes to stderr; Spark's own
log lines too, but only with ``-v``. pyspark is imported only when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from headwater.cli import exitcodes, output
from headwater.cli.context import current
from headwater.cli.errors import CliError

__all__ = ["register", "verify"]

Paths = Annotated[
    list[Path] | None,
    typer.Argument(
        help="Backup directories, or directories holding many (account backups).",
        show_default=False,
    ),
]
Master = Annotated[
    str, typer.Option("--master", help="Spark master URL: local[N], spark://HOST:PORT, ...")
]
JsonOpt = Annotated[bool, typer.Option("--json", "-j", help="Print the result as JSON.")]
Verbose = Annotated[
    bool,
    typer.Option("--verbose", "-v", help="Also show Spark's own log lines on stderr."),
]
ReportDir = Annotated[
    Path | None,
    typer.Option(
        "--report",
        help="Write a JSON report per backup, summary.json and findings.parquet here.",
        show_default=False,
    ),
]
Compare = Annotated[
    tuple[Path, Path] | None,
    typer.Option(
        "--compare",
        help="Also compare two backups (origin vs mirror, before vs after): sequences, "
        "subjects, payload and header digests.",
        show_default=False,
    ),
]


def verify(
    ctx: typer.Context,
    paths: Paths = None,
    master: Master = "local[*]",
    json_output: JsonOpt = False,
    report: ReportDir = None,
    compare: Compare = None,
    verbose: Verbose = False,
) -> None:
    """Verify backups with Spark: archive structure and checksums, sequences, counts,
    consumer state and config. Exits 1 on any finding."""
    from headwater.verify.backupdir import VerifyError
    from headwater.verify.job import resolve_targets, run_verification, summary_lines
    from headwater.verify.report import write_report
    from headwater.verify.session import verification_session

    wants_json = current(ctx).wants_json(json_output)
    try:
        resolve_targets(paths or [], compare)  # wrong paths fail before Spark starts
        # Progress goes to stderr, also with --json: stdout holds the result alone.
        output.note(f"starting Spark ({master})")
        with verification_session(master, verbose) as spark:
            result = run_verification(spark, paths or [], compare, _progress)
            if report is not None:
                write_report(spark, result, report)
    except VerifyError as error:
        raise CliError(str(error)) from None
    if wants_json:
        output.emit_json(result.to_dict())
    else:
        for line in summary_lines(result):
            output.console().print(line, markup=False)
    if not result.ok:
        raise typer.Exit(exitcodes.ERROR)


def _progress(line: str) -> None:
    output.error_console().print(line, markup=False, highlight=False)


def register(root: typer.Typer) -> None:
    root.command("verify")(verify)
