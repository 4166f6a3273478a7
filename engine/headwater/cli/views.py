"""Human views of server replies: streams, consumers and the account, as rich panels.

Each view reads the server's JSON (the same object ``--json`` prints), so the two outputs can
never disagree about what the server said.
"""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape

from headwater.cli import output
from headwater.cli.output import UNLIMITED, count, duration, size
from headwater.control import units

Json = dict[str, Any]


#: Stream config fields in nanoseconds, with what 0 means for each.
_DURATIONS = {"max_age": UNLIMITED, "duplicate_window": "-", "subject_delete_marker_ttl": "-"}
#: Fields in bytes and plain counts; -1 means no limit for both.
_SIZES = frozenset({"max_bytes", "max_msg_size"})
_COUNTS = frozenset({"max_msgs", "max_msgs_per_subject", "max_consumers"})


def config_value(field: str, value: Any) -> str:
    """One server-JSON config value as ``stream edit`` reports it: in the units its flag takes
    (``1y``, ``10GiB``, ``1M``), ``unlimited`` for no limit and ``-`` for unset, as natscli
    prints them, so a value read here can be typed back in."""
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and field in _DURATIONS:
        return duration(value, zero=_DURATIONS[field])
    if isinstance(value, int) and field in _SIZES:
        return UNLIMITED if value < 0 else units.format_size(value)
    if isinstance(value, int) and field in _COUNTS:
        return UNLIMITED if value < 0 else units.format_count(value)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return ", ".join(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(", ", ": "))


def change_lines(diff: list[tuple[str, Any, Any]]) -> list[str]:
    """``field: before -> after`` for each changed field, in human units."""
    return [
        f"{field}: {config_value(field, before)} -> {config_value(field, after)}"
        for field, before, after in diff
    ]


def _yes_no(value: object) -> str:
    return "yes" if value else "no"


def _seq_at(seq: int, ts: str | None) -> str:
    when = f" @ {ts}" if ts and not ts.startswith("0001-") else ""
    return f"{seq:,}{when}"


def stream_info(info: Json) -> None:
    cfg: Json = info.get("config", {})
    state: Json = info.get("state", {})
    configuration = [
        ("Subjects", ", ".join(cfg.get("subjects") or []) or "-"),
        ("Description", cfg.get("description") or "-"),
        ("Acknowledgements", _yes_no(not cfg.get("no_ack"))),
        ("Storage", cfg.get("storage", "file")),
        ("Retention", cfg.get("retention", "limits")),
        ("Discard Policy", cfg.get("discard", "old")),
        ("Replicas", cfg.get("num_replicas", 1)),
        ("Duplicate Window", duration(cfg.get("duplicate_window"), zero="none")),
        ("Maximum Messages", count(cfg.get("max_msgs"))),
        ("Maximum Per Subject", count(cfg.get("max_msgs_per_subject"))),
        ("Maximum Bytes", size(cfg.get("max_bytes"))),
        ("Maximum Age", duration(cfg.get("max_age"))),
        ("Maximum Message Size", size(cfg.get("max_msg_size"))),
        ("Maximum Consumers", count(cfg.get("max_consumers"))),
        ("Allows Rollups", _yes_no(cfg.get("allow_rollup_hdrs"))),
        ("Allows Direct Get", _yes_no(cfg.get("allow_direct"))),
        ("Deny Delete", _yes_no(cfg.get("deny_delete"))),
        ("Deny Purge", _yes_no(cfg.get("deny_purge"))),
    ]
    if cfg.get("sealed"):
        configuration.append(("Sealed", "yes"))
    statistics = [
        ("Messages", count(state.get("messages", 0))),
        ("Bytes", size(state.get("bytes", 0))),
        ("First Sequence", _seq_at(state.get("first_seq", 0), state.get("first_ts"))),
        ("Last Sequence", _seq_at(state.get("last_seq", 0), state.get("last_ts"))),
        ("Deleted Messages", count(state.get("num_deleted", 0))),
        ("Active Consumers", count(state.get("consumer_count", 0))),
        ("Number of Subjects", count(state.get("num_subjects", 0))),
    ]
    name = escape(str(cfg.get("name", "?")))
    title = f"Stream [bold]{name}[/bold] created {info.get('created', '?')}"
    sections = [("Configuration", configuration), ("State", statistics)]
    cluster = info.get("cluster")
    if isinstance(cluster, dict) and cluster.get("name"):
        # In a cluster only: a single server's block names only itself, as leader.
        sections.append(("Cluster Information", cluster_rows(cluster)))
    output.panel(title, sections)


def cluster_rows(cluster: Json) -> list[tuple[str, object]]:
    """A replicated stream's (or consumer's) ``cluster`` block as ``nats stream info`` words
    it: the cluster, the leader, and each other replica: current or outdated, when it was
    last seen, how far behind; while the peers change, where they go."""
    rows: list[tuple[str, object]] = [
        ("Name", cluster.get("name")),
        ("Leader", cluster.get("leader") or "none"),
    ]
    for replica in cluster.get("replicas") or []:
        rows.append(("Replica", replica_text(replica)))
    desired = cluster.get("desired")
    if isinstance(desired, dict):
        wanted = ", ".join(r.get("name", "?") for r in desired.get("replicas") or []) or "-"
        origin = (desired.get("origin") or {}).get("replicas")
        if origin:
            wanted += f" (from {origin} replicas)"
        rows.append(("Changing To", wanted))
        status = (desired.get("status") or {}).get("description")
        if status:
            rows.append(("Change Status", status))
    return rows


def replica_text(replica: Json) -> str:
    """One replica: ``s2, current, seen 0.01s ago`` (``, 5 operations behind`` when lagging;
    ``pending`` while it is being added)."""
    state = "current" if replica.get("current") else "outdated"
    if replica.get("pending"):
        state = "pending"
    text = f"{replica.get('name', '?')}, {state}"
    active = replica.get("active")
    if isinstance(active, int) and active > 0:
        text += f", seen {active / 1e9:.2f}s ago"
    if replica.get("offline"):
        text += ", offline"
    if replica.get("lag"):
        text += f", {count(replica['lag'])} operations behind"
    return text


def stream_rows(infos: list[Json]) -> list[tuple[object, ...]]:
    rows = []
    for info in infos:
        cfg, state = info["config"], info.get("state", {})
        rows.append(
            (
                cfg["name"],
                ", ".join(cfg.get("subjects") or []),
                count(state.get("messages", 0)),
                size(state.get("bytes", 0)),
                count(state.get("consumer_count", 0)),
            )
        )
    return rows


def _deliver(cfg: Json) -> str:
    policy = str(cfg.get("deliver_policy", "all"))
    if policy == "by_start_sequence":
        return f"from sequence {cfg.get('opt_start_seq')}"
    if policy == "by_start_time":
        return f"since {cfg.get('opt_start_time')}"
    return policy


def consumer_info(info: Json) -> None:
    cfg: Json = info.get("config", {})
    single = cfg.get("filter_subject")
    filters = cfg.get("filter_subjects") or ([single] if single else [])
    configuration = [
        ("Name", info.get("name", cfg.get("durable_name", "?"))),
        ("Description", cfg.get("description") or "-"),
        ("Mode", f"push to {cfg['deliver_subject']}" if cfg.get("deliver_subject") else "pull"),
        ("Deliver Group", cfg.get("deliver_group") or "-"),
        ("Filter", ", ".join(filters) or "-"),
        ("Deliver Policy", _deliver(cfg)),
        ("Ack Policy", cfg.get("ack_policy", "none")),
        ("Ack Wait", duration(cfg.get("ack_wait"), zero="-")),
        ("Replay Policy", cfg.get("replay_policy", "instant")),
        ("Maximum Deliveries", count(cfg.get("max_deliver"))),
        ("Max Ack Pending", count(cfg.get("max_ack_pending"))),
        ("Sampling Rate", cfg.get("sample_freq") or "-"),
    ]
    if not cfg.get("deliver_subject"):
        configuration.append(("Max Waiting Pulls", count(cfg.get("max_waiting"))))
    delivered: Json = info.get("delivered", {})
    floor: Json = info.get("ack_floor", {})
    state = [
        (
            "Last Delivered",
            f"consumer seq {delivered.get('consumer_seq', 0):,}, "
            f"stream seq {delivered.get('stream_seq', 0):,}",
        ),
        (
            "Acknowledgment Floor",
            f"consumer seq {floor.get('consumer_seq', 0):,}, "
            f"stream seq {floor.get('stream_seq', 0):,}",
        ),
        ("Outstanding Acks", count(info.get("num_ack_pending", 0))),
        ("Redelivered Messages", count(info.get("num_redelivered", 0))),
        ("Unprocessed Messages", count(info.get("num_pending", 0))),
        ("Waiting Pulls", count(info.get("num_waiting", 0))),
    ]
    names = escape(f"{info.get('stream_name', '?')} > {info.get('name', '?')}")
    title = f"Consumer [bold]{names}[/bold]"
    output.panel(title, [("Configuration", configuration), ("State", state)])


def consumer_rows(infos: list[Json]) -> list[tuple[object, ...]]:
    rows = []
    for info in infos:
        cfg = info.get("config", {})
        rows.append(
            (
                info["name"],
                "push" if cfg.get("deliver_subject") else "pull",
                cfg.get("filter_subject") or ", ".join(cfg.get("filter_subjects") or []) or "-",
                cfg.get("ack_policy", "none"),
                count(info.get("num_pending", 0)),
                count(info.get("num_ack_pending", 0)),
            )
        )
    return rows


def account_info(info: Json) -> None:
    limits: Json = info.get("limits", {})
    usage = [
        ("Memory", f"{size(info.get('memory', 0))} of {size(limits.get('max_memory', -1))}"),
        ("Storage", f"{size(info.get('storage', 0))} of {size(limits.get('max_storage', -1))}"),
        ("Streams", f"{count(info.get('streams', 0))} of {count(limits.get('max_streams', -1))}"),
        (
            "Consumers",
            f"{count(info.get('consumers', 0))} of {count(limits.get('max_consumers', -1))}",
        ),
    ]
    api: Json = info.get("api", {})
    api_rows = [("Requests", count(api.get("total", 0))), ("Errors", count(api.get("errors", 0)))]
    if info.get("domain"):
        usage.insert(0, ("Domain", info["domain"]))
    output.panel("JetStream Account Information", [("Usage", usage), ("API", api_rows)])
