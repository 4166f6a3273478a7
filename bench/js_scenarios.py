"""The JetStream scenarios of issue 3, each against both servers in the same run.

* async publish (gobench ``js_pub_async``, 16 B): file storage with each server's durable
  mode, file storage with periodic sync, memory storage;
* pull consumer fetch (gobench ``js_fetch``), printed ``n/a`` with the reason if it fails;
* a stream holding many messages: server RSS and restart-to-ready time (``js_store``);
* ``bench/store_bench.py``'s store-level figures, quoted (headwater only).

gobench recreates stream GOBENCH (subject ``gobench.js``) on every run and deletes it at the
end, so repeats start from an empty stream.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import js_config
import js_store
import loads_gobench
from js_config import ALWAYS, DEFAULT, INTERVAL
from results import Measure, Target, Throughput
from scenarios import SIZE, Plan, _throughput

# nats.go gives up ("stalled with too many outstanding async published messages") when no ack
# frees the window within 200 ms; with an fsync per message nats-server's acks trickle in too
# slowly for gobench's default window of 4,000, so the durable rows use a smaller one, the same
# for both servers.
DURABLE_WINDOW = 256
WINDOW = 4000
# Even so, one fsync stuck behind other I/O on the shared disk can stall nats.go's window for
# 200 ms; such a run is repeated (and counted in the note) instead of losing the row.
STALL_RETRIES = 3


def _row(
    plan: Plan,
    versions: dict[str, str],
    binary: Path,
    ident: str,
    label: str,
    scenario: str,
    flags: list[str],
    sync: dict[str, str | None],
    msgs: int,
    target: Target | None,
) -> Measure:
    """One gobench JetStream scenario against both servers, each with its own durability mode."""

    stalls = [0]

    def load(url: str, count: int) -> Throughput:
        for attempt in range(STALL_RETRIES + 1):
            try:
                run, client = loads_gobench.gobench(
                    binary, url, scenario, count, SIZE, flags, timeout=300
                )
            except RuntimeError as exc:
                if "stalled" not in str(exc) or attempt == STALL_RETRIES:
                    raise
                stalls[0] += 1
                continue
            versions["nats_go"] = client
            return run
        raise AssertionError("unreachable: the last attempt returns or raises")

    modes = f"hw {js_config.describe(sync['headwater'])}, nats {js_config.describe(sync['nats'])}"
    try:
        with js_config.js_args(sync) as args:
            measure = _throughput(ident, label, "gobench", load, msgs, plan, target, args)
    except RuntimeError as exc:
        # A scenario the server cannot run yet prints n/a with the reason instead of vanishing.
        reason = str(exc).splitlines()[0][:200]
        return Measure(ident, label, "gobench", "msgs/s", None, None, target, f"n/a: {reason}")
    retried = f"; {stalls[0]} runs repeated after a nats.go stall" if stalls[0] else ""
    measure.note = f"{modes}; {' '.join(flags)}; {measure.note}{retried}"
    return measure


def publish_and_fetch(plan: Plan, versions: dict[str, str]) -> list[Measure]:
    """Async publish in three storage/durability pairings, then a pull-consumer fetch."""
    rows: list[tuple[str, str, str, list[str], dict[str, str | None], int, Target | None]] = [
        (
            "js_pub.file_durable",
            "JS async pub 16 B, file, durable",
            "js_pub_async",
            ["-storage", "file", "-window", str(DURABLE_WINDOW)],
            {"headwater": DEFAULT, "nats": ALWAYS},
            plan.js_durable_msgs,
            Target("ratio_min", 2.0, ">= 2.00x"),
        ),
        (
            "js_pub.file_interval",
            "JS async pub 16 B, file, periodic sync",
            "js_pub_async",
            ["-storage", "file", "-window", str(WINDOW)],
            {"headwater": INTERVAL, "nats": DEFAULT},
            plan.js_msgs,
            Target("ratio_min", 0.25, ">= 0.25x"),
        ),
        (
            "js_pub.memory",
            "JS async pub 16 B, memory",
            "js_pub_async",
            ["-storage", "memory", "-window", str(WINDOW)],
            {"headwater": DEFAULT, "nats": DEFAULT},
            plan.js_msgs,
            Target("ratio_min", 0.30, ">= 0.30x"),
        ),
        (
            # Like with like: nats-server's default is periodic sync (2 min), so headwater runs
            # in "2m" mode too, where the consumer state writes also skip their fsyncs.
            "js_fetch.file",
            "JS pull fetch+ack 16 B, file, periodic sync",
            "js_fetch",
            ["-storage", "file", "-batch", "500"],
            {"headwater": INTERVAL, "nats": DEFAULT},
            plan.js_fetch_msgs,
            Target("ratio_min", 0.25, ">= 0.25x"),
        ),
    ]
    try:
        binary = loads_gobench.ensure_gobench()
    except loads_gobench.GobenchUnavailable as exc:
        reason = str(exc).splitlines()[0]
        return [
            Measure(ident, label, "gobench", "msgs/s", None, None, target, f"n/a: {reason}")
            for ident, label, _, _, _, _, target in rows
        ]
    return [
        _row(plan, versions, binary, ident, label, scenario, flags, sync, msgs, target)
        for ident, label, scenario, flags, sync, msgs, target in rows
    ]


def store_bench(plan: Plan) -> list[Measure]:
    """Run bench/store_bench.py (the file store alone, in-process) and quote two of its figures."""
    script = Path(__file__).resolve().parent / "store_bench.py"
    msgs = plan.store_bench_msgs
    durable = str(min(100_000, max(2_000, msgs // 20)))
    done = subprocess.run(
        [sys.executable, str(script), "--msgs", str(msgs), "--durable-msgs", durable],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    scenario = f"store_bench, {msgs:,} msgs"
    # The snapshot restart line, e.g. "restart (index snapshot, ...): 0.27 s for 2,000,000
    # msgs; RSS 21.0 B/msg".
    found = re.search(
        r"restart \(index snapshot[^)]*\): ([\d.]+) s for [\d,]+ msgs; RSS ([\d.]+)", done.stdout
    )
    full = 2_000_000
    at_target = msgs >= full
    if done.returncode != 0 or found is None:
        reason = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1][:200]
        return [
            Measure("store.rss_per_msg", scenario, "FileStore", "B/msg", None, None, None,
                    f"n/a: store_bench failed: {reason}"),
            Measure("store.restart", scenario, "FileStore", "restart s", None, None, None,
                    f"n/a: store_bench failed: {reason}"),
        ]  # fmt: skip
    restart_s, per_msg = float(found.group(1)), float(found.group(2))
    scan = re.search(r"restart \(full scan[^)]*\): ([\d.]+) s", done.stdout)
    scan_note = f"full scan without the index snapshot: {scan.group(1)} s" if scan else ""
    note = "headwater only (FileStore opened in a fresh interpreter)"
    return [
        Measure(
            "store.rss_per_msg",
            scenario,
            "FileStore",
            "B/msg",
            per_msg,
            None,
            Target("headwater_max", 64.0, "hw <= 64 B") if at_target else None,
            note,
        ),
        Measure(
            "store.restart",
            scenario,
            "FileStore",
            "restart s",
            restart_s,
            None,
            Target("headwater_max", 5.0, "hw <= 5 s") if at_target else None,
            "; ".join(filter(None, [note, scan_note])),
        ),
    ]


def jetstream(plan: Plan, versions: dict[str, str]) -> list[Measure]:
    """Every JetStream row, in report order."""
    measures = publish_and_fetch(plan, versions)
    measures += js_store.stored_messages(plan)
    measures += store_bench(plan)
    return measures
