"""``stream report`` and ``consumer report``: natscli's report tables, as rows and as JSON.

The columns follow natscli's ``nats stream report`` (stream, storage, placement, consumers,
messages, bytes, lost, deleted, replicas) and ``nats consumer report`` (consumer, mode, ack
policy, ack wait, ack pending, redelivered, unprocessed, ack floor), the latter with the last
delivered stream sequence and the waiting pull requests added. ``--json`` prints the same
rows with raw numbers (bytes, nanoseconds) under snake_case keys. Everything is read from the
server's stream and consumer infos; nothing is computed that the server did not report.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from headwater.cli.jsapi import Json
from headwater.cli.output import count, duration, size

Row = dict[str, Any]

STREAM_COLUMNS = (
    "Stream", "Storage", "Placement", "Consumers", "Messages", "Bytes", "Lost", "Deleted",
    "Replicas",
)  # fmt: skip
CONSUMER_COLUMNS = (
    "Consumer", "Mode", "Ack Policy", "Ack Wait", "Ack Pending", "Redelivered", "Unprocessed",
    "Ack Floor", "Last Delivered", "Waiting",
)  # fmt: skip

#: ``stream report`` sort flags (natscli's): the row key to sort by. Bytes when none is given.
STREAM_SORTS: dict[str, Callable[[Row], Any]] = {
    "consumers": lambda row: row["consumers"],
    "messages": lambda row: row["messages"],
    "name": lambda row: row["stream"],
    "storage": lambda row: row["storage"],
    "bytes": lambda row: row["bytes"],
}


def stream_row(info: Json) -> Row:
    cfg, state = info["config"], info.get("state") or {}
    lost = state.get("lost") or {}
    deleted = state.get("num_deleted", 0)
    if state.get("deleted"):  # a server that lists the sequences counts them too
        deleted = len(state["deleted"])
    return {
        "stream": cfg["name"],
        "storage": cfg.get("storage", "file"),
        "placement": cfg.get("placement") or None,
        "consumers": state.get("consumer_count", 0),
        "messages": state.get("messages", 0),
        "bytes": state.get("bytes", 0),
        "lost_messages": len(lost.get("msgs") or []),
        "lost_bytes": lost.get("bytes", 0),
        "deleted": deleted,
        "replicas": cfg.get("num_replicas", 1),
        "leader": (info.get("cluster") or {}).get("leader"),
        "peers": _peers(info.get("cluster") or {}),
    }


def _peers(cluster: Json) -> list[Row]:
    """The leader and the other replicas, each current or not and how far behind."""
    leader = cluster.get("leader")
    peers: list[Row] = (
        [{"name": leader, "leader": True, "current": True, "lag": 0}] if leader else []
    )
    for replica in cluster.get("replicas") or []:
        peers.append(
            {
                "name": replica.get("name"),
                "leader": False,
                "current": bool(replica.get("current")),
                "lag": replica.get("lag", 0),
            }
        )
    return peers


def _replicas_cell(row: Row) -> object:
    """natscli's replicas column in a cluster: the leader starred, a replica not current
    marked ``!``; the count otherwise."""
    if not row["peers"]:
        return row["replicas"]
    return ", ".join(
        f"{p['name']}{'*' if p['leader'] else ''}{'' if p['current'] else '!'}"
        for p in row["peers"]
    )


def stream_cells(row: Row, raw: bool) -> tuple[object, ...]:
    lost = "0"
    if row["lost_messages"]:
        lost = (
            f"{row['lost_messages']} ({row['lost_bytes']})"
            if raw
            else f"{count(row['lost_messages'])} ({size(row['lost_bytes'])})"
        )
    number: Callable[[int], object] = (lambda value: value) if raw else count
    return (
        row["stream"],
        row["storage"],
        _placement(row["placement"]),
        number(row["consumers"]),
        number(row["messages"]),
        row["bytes"] if raw else size(row["bytes"]),
        lost,
        number(row["deleted"]),
        _replicas_cell(row),
    )


def _placement(placement: Json | None) -> str:
    if not placement:
        return ""
    parts = []
    if placement.get("cluster"):
        parts.append(f"cluster: {placement['cluster']}")
    if placement.get("tags"):
        parts.append(f"tags: {', '.join(placement['tags'])}")
    return " ".join(parts)


def consumer_row(info: Json) -> Row:
    cfg = info.get("config") or {}
    return {
        "consumer": info["name"],
        "mode": "push" if cfg.get("deliver_subject") else "pull",
        "ack_policy": cfg.get("ack_policy", "none"),
        "ack_wait": cfg.get("ack_wait", 0),
        "ack_pending": info.get("num_ack_pending", 0),
        "redelivered": info.get("num_redelivered", 0),
        "unprocessed": info.get("num_pending", 0),
        "ack_floor": (info.get("ack_floor") or {}).get("stream_seq", 0),
        "last_delivered": (info.get("delivered") or {}).get("stream_seq", 0),
        "waiting": info.get("num_waiting", 0),
    }


def consumer_cells(row: Row, stream_messages: int, raw: bool) -> tuple[object, ...]:
    if raw:
        return (
            row["consumer"], row["mode"].capitalize(), row["ack_policy"], row["ack_wait"],
            row["ack_pending"], row["redelivered"], row["unprocessed"], row["ack_floor"],
            row["last_delivered"], row["waiting"],
        )  # fmt: skip
    return (
        row["consumer"],
        row["mode"].capitalize(),
        row["ack_policy"],
        duration(row["ack_wait"], zero="-"),
        count(row["ack_pending"]),
        count(row["redelivered"]),
        _unprocessed(row["unprocessed"], stream_messages),
        count(row["ack_floor"]),
        count(row["last_delivered"]),
        count(row["waiting"]),
    )


def _unprocessed(pending: int, stream_messages: int) -> str:
    """``N / P%``: what is left and its share of the stream (natscli's, floored, at most 100)."""
    if pending <= 0:
        return "0"
    share = 100 if stream_messages <= 0 else min(100, math.floor(pending / stream_messages * 100))
    return f"{count(pending)} / {share}%"
