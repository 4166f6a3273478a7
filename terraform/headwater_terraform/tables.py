"""The attribute tables: which spec fields each resource exposes, and their kinds.

Names are the server's JSON names (interfaces.md: snake_case as in StreamConfig and
ConsumerConfig), so a Terraform attribute, a YAML spec field and ``--json`` output agree.
"""

from __future__ import annotations

from headwater_terraform.fields import Field

TRANSFORM = (Field("src", description="Source subject filter."), Field("dest", required=True))

SOURCE = (
    Field("name", required=True, description="The origin stream (or bucket)."),
    Field("opt_start_seq", "number"),
    Field("opt_start_time", description="RFC 3339 time to start from."),
    Field("filter_subject"),
    Field("subject_transforms", "objects", nested=TRANSFORM),
    Field("external", "object", nested=(Field("api"), Field("deliver"))),
    Field("consumer", "object", nested=(Field("name"), Field("deliver_subject"))),
)

PLACEMENT = Field(
    "placement",
    "object",
    "Where replicas go.",
    nested=(Field("cluster"), Field("tags", "strings"), Field("preferred")),
)
REPUBLISH = Field(
    "republish",
    "object",
    "Republish stored messages.",
    nested=(Field("src"), Field("dest", required=True), Field("headers_only", "bool")),
)

STREAM_FIELDS: tuple[Field, ...] = (
    Field("description"),
    Field("subjects", "strings", "Subjects the stream stores; defaults to the stream's name."),
    Field("retention", description="`limits`, `interest` or `workqueue`."),
    Field("max_consumers", "number", "-1 is unlimited."),
    Field("max_msgs", "count"),
    Field("max_bytes", "size"),
    Field("max_age", "duration", "0s keeps messages forever."),
    Field("max_msgs_per_subject", "count"),
    Field("max_msg_size", "size"),
    Field("discard", description="`old` or `new`."),
    Field("storage", description="`file` or `memory`; changing it replaces the stream."),
    Field("num_replicas", "number"),
    Field("no_ack", "bool"),
    Field("duplicate_window", "duration"),
    PLACEMENT,
    Field("mirror", "object", "Make this stream a mirror.", nested=SOURCE),
    Field("sources", "objects", "Streams this stream sources from.", nested=SOURCE),
    Field("compression", description="`none` or `s2`."),
    Field("first_seq", "number"),
    Field("subject_transform", "object", nested=TRANSFORM),
    REPUBLISH,
    Field("allow_direct", "bool"),
    Field("mirror_direct", "bool"),
    Field("discard_new_per_subject", "bool"),
    Field("sealed", "bool"),
    Field("deny_delete", "bool"),
    Field("deny_purge", "bool"),
    Field("allow_rollup_hdrs", "bool"),
    Field(
        "consumer_limits",
        "object",
        "Defaults and limits for the stream's consumers.",
        nested=(Field("inactive_threshold", "duration"), Field("max_ack_pending", "number")),
    ),
    Field("allow_msg_ttl", "bool"),
    Field("subject_delete_marker_ttl", "duration"),
    Field("allow_msg_counter", "bool"),
    Field("allow_atomic", "bool"),
    Field("allow_msg_schedules", "bool"),
    Field("allow_batched", "bool"),
    Field("persist_mode", description="`default` or `async`."),
    Field("metadata", "map"),
)

CONSUMER_FIELDS: tuple[Field, ...] = (
    Field("description"),
    Field("deliver_policy", description="`all`, `last`, `new`, `by_start_sequence`, ..."),
    Field("opt_start_seq", "number"),
    Field("opt_start_time", description="RFC 3339 time, with deliver_policy by_start_time."),
    Field("ack_policy", description="`none`, `all`, `explicit` or `flow_control`."),
    Field("ack_wait", "duration"),
    Field("max_deliver", "number"),
    Field("backoff", "durations"),
    Field("filter_subject"),
    Field("filter_subjects", "strings"),
    Field("replay_policy", description="`instant` or `original`."),
    Field("rate_limit_bps", "number"),
    Field("sample_freq", description="Percentage of acks sampled, e.g. `100`."),
    Field("max_waiting", "number"),
    Field("max_ack_pending", "number"),
    Field("flow_control", "bool"),
    Field("headers_only", "bool"),
    Field("max_batch", "number"),
    Field("max_expires", "duration"),
    Field("max_bytes", "size"),
    Field("deliver_subject", description="Set for a push consumer; unset is pull."),
    Field("deliver_group"),
    Field("idle_heartbeat", "duration"),
    Field("inactive_threshold", "duration"),
    Field("num_replicas", "number"),
    Field("mem_storage", "bool"),
    Field("metadata", "map"),
    Field("pause_until", description="RFC 3339 time until which the consumer is paused."),
    Field("priority_groups", "strings"),
    Field("priority_policy"),
    Field("priority_timeout", "duration"),
)

BUCKET_FIELDS: tuple[Field, ...] = (
    Field("description"),
    Field("ttl", "duration"),
    Field("max_bytes", "size"),
    Field("storage", description="`file` or `memory`; changing it replaces the bucket."),
    Field("replicas", "number"),
    PLACEMENT,
    Field("compression", "bool"),
    Field("metadata", "map"),
)

KV_FIELDS: tuple[Field, ...] = (
    *BUCKET_FIELDS,
    Field("history", "number", "Values kept per key (1-64)."),
    Field("max_value_size", "size"),
    REPUBLISH,
    Field("mirror", "object", nested=SOURCE),
    Field("sources", "objects", nested=SOURCE),
    Field("limit_marker_ttl", "duration"),
)
