"""The operator's pure parts: spellings, spec normalization, connection profiles, status,
flags."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from headwater.control import api
from headwater.control.connection import ConnectionSettings
from headwater.control.models import Consumer, Stream
from headwater.testing import ServerProcess
from headwater_operator.config import parse_args
from headwater_operator.connection import (
    ConnectionPool,
    FileCache,
    InvalidConnection,
    ProfileInvalid,
    ProfileLookup,
    ProfileMissing,
    configmap_data,
    secret_data,
    settings_for,
)
from headwater_operator.ownership import owner_of
from headwater_operator.reconcile import Condition
from headwater_operator.resources import drop_defaulted_duplicates, parse_body
from headwater_operator.spellings import nested_model, spellings
from headwater_operator.status import clip, merge_conditions

DEFAULTS = ConnectionSettings(servers=("nats://default:4222",), user="op", password="pw")


def test_spellings_prefer_camel_case_and_know_nack_names() -> None:
    table = spellings(Stream)
    assert table["max_age"] == ["maxAge", "max_age"]
    assert table["num_replicas"][0] == "numReplicas"
    assert "replicas" in table["num_replicas"]
    assert table["storage"] == ["storage"]
    assert nested_model(Stream, "consumer_limits").__name__ == "ConsumerLimits"  # type: ignore[union-attr]
    assert nested_model(Stream, "sources").__name__ == "StreamSource"  # type: ignore[union-attr]
    assert nested_model(Stream, "max_age") is None


def test_defaulted_duplicates_are_dropped_but_real_conflicts_kept() -> None:
    spec = {"max_age": "1h", "maxAge": 0, "replicas": 3, "numReplicas": 1}
    assert drop_defaulted_duplicates(spec, Stream) == {"max_age": "1h", "replicas": 3}
    # Both spellings given by the user with different non-default values: the model decides.
    conflict = {"max_age": "1h", "maxAge": "2h"}
    assert drop_defaulted_duplicates(conflict, Stream) == conflict
    nested = {"sources": [{"name": "A", "opt_start_seq": 5, "optStartSeq": 0}]}
    assert drop_defaulted_duplicates(nested, Stream) == {
        "sources": [{"name": "A", "opt_start_seq": 5}]
    }


def body(kind: str, spec: dict[str, object], **metadata: object) -> dict[str, object]:
    return {
        "apiVersion": "headwater.io/v1",
        "kind": kind,
        "metadata": {"name": "orders-new", "namespace": "default", **metadata},
        "spec": spec,
    }


def test_parse_body_uses_metadata_name_and_reports_model_errors() -> None:
    parsed = parse_body(body("Consumer", {"streamName": "ORDERS"}))
    assert parsed.resource is not None
    assert isinstance(parsed.resource.spec, Consumer)
    assert parsed.resource.spec.server_name == "orders-new"
    annotated = parse_body(body("Stream", {}, annotations={"headwater.io/allow-replace": "true"}))
    assert annotated.resource is not None and annotated.resource.allow_replace
    broken = parse_body(body("Consumer", {"streamName": "S", "filterSubject": "a..b"}))
    assert broken.resource is None
    assert "filter" in broken.message or "subject" in broken.message


def test_secret_and_configmap_data_keep_only_profile_keys() -> None:
    encoded = {
        k: base64.b64encode(v.encode()).decode()
        for k, v in {"user": "u", "password": "p", "other": "x"}.items()
    }
    assert secret_data({"data": {**encoded, "token": "!!not base64!!"}}) == {
        "user": "u",
        "password": "p",
    }
    assert configmap_data({"data": {"servers": "nats://a", "junk": "1"}}) == {"servers": "nats://a"}


def spec(**fields: object) -> Stream:
    return Stream.model_validate({"name": "S", **fields})


def test_profile_resolution_order(tmp_path: Path) -> None:
    files = FileCache(tmp_path / "cache")
    profiles = ProfileLookup(
        secrets={"tenant": {"token": "t0k3n", "creds": "-----BEGIN NATS USER JWT-----"}},
        configmaps={
            "tenant": {"servers": "nats://a:4222, nats://b:4222"},
            "headwater-connection": {"servers": "nats://ns:4222"},
        },
    )
    # No profile named: the namespace default's servers, the operator's login.
    chosen = settings_for(spec(), profiles, DEFAULTS, files, "headwater-connection")
    assert chosen.servers == ("nats://ns:4222",)
    assert (chosen.user, chosen.password) == ("op", "pw")
    # spec.account: that profile; its login replaces the operator's.
    tenant = settings_for(spec(account="tenant"), profiles, DEFAULTS, files, "headwater-connection")
    assert tenant.servers == ("nats://a:4222", "nats://b:4222")
    assert tenant.token == "t0k3n" and tenant.user is None
    creds = Path(tenant.credentials or "")
    assert creds.read_text() == "-----BEGIN NATS USER JWT-----"
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    # spec fields (paths in the operator pod, as NACK has them) win over the profile.
    direct = settings_for(
        spec(account="tenant", servers=["nats://c:4222"], tls={"rootCas": ["/ca.pem"]}),
        profiles,
        DEFAULTS,
        files,
        "headwater-connection",
    )
    assert direct.servers == ("nats://c:4222",) and direct.tls_ca == "/ca.pem"
    # Nothing anywhere: the operator's defaults.
    empty = ProfileLookup({}, {})
    assert settings_for(spec(), empty, DEFAULTS, files, "headwater-connection") == DEFAULTS
    with pytest.raises(ProfileMissing, match="tenant-b"):
        settings_for(spec(account="tenant-b"), empty, DEFAULTS, files, "x")
    files.cleanup()
    assert creds.exists()  # a given cache dir belongs to the caller


SEED = "SUAMK2FG4MI6UE3ACF3FK3OIQBCEIEZV7NSWFFEW63UXMRLFM2XLAXK4GY"


def test_nkey_and_domain_from_profile_and_spec(tmp_path: Path) -> None:
    files = FileCache(tmp_path / "cache")
    defaults = DEFAULTS.model_copy(update={"js_domain": "operator"})
    profiles = ProfileLookup(
        secrets={"signer": {"nkey": SEED + "\n"}},
        configmaps={"signer": {"servers": "nats://leaf:4222", "jsDomain": "hub"}},
    )
    # The operator's default domain and login, when no profile says otherwise.
    plain = settings_for(spec(), profiles, defaults, files, "headwater-connection")
    assert (plain.js_domain, plain.user, plain.nkey) == ("operator", "op", None)
    # A profile's seed is written to a private file; its nkey login replaces the operator's.
    signer = settings_for(spec(account="signer"), profiles, defaults, files, "x")
    assert signer.servers == ("nats://leaf:4222",) and signer.js_domain == "hub"
    assert (signer.user, signer.password, signer.token, signer.credentials) == (None,) * 4
    seed = Path(signer.nkey or "")
    assert seed.read_text() == SEED + "\n"
    assert stat.S_IMODE(seed.stat().st_mode) == 0o600
    assert signer.api_prefix == "$JS.hub.API"
    # spec.jsDomain and spec.nkey (a path in the operator pod, as NACK has it) win.
    direct = settings_for(
        spec(account="signer", jsDomain="edge", nkey="/etc/nats/user.nk"),
        profiles,
        defaults,
        files,
        "x",
    )
    assert (direct.js_domain, direct.nkey) == ("edge", "/etc/nats/user.nk")
    assert direct.servers == ("nats://leaf:4222",)
    # A login named in the spec replaces every other: creds drops the profile's seed, and
    # the operator's user.
    creds = settings_for(spec(account="signer", creds="/c.creds"), profiles, defaults, files, "x")
    assert (creds.credentials, creds.nkey, creds.user) == ("/c.creds", None, None)
    nkey_only = settings_for(spec(nkey="/u.nk"), profiles, defaults, files, "x")
    assert (nkey_only.nkey, nkey_only.user, nkey_only.password) == ("/u.nk", None, None)
    # Settings differing only in domain or seed are different pool keys.
    assert len({plain, signer, direct, nkey_only}) == 4


def test_invalid_domains_blame_the_spec_or_the_profile(tmp_path: Path) -> None:
    files = FileCache(tmp_path / "cache")
    profiles = ProfileLookup(
        secrets={}, configmaps={"dotted": {"jsDomain": "a.b"}, "fine": {"jsDomain": "hub"}}
    )
    with pytest.raises(InvalidConnection, match=r"spec\.jsDomain: invalid JetStream domain"):
        settings_for(spec(account="fine", jsDomain="a.b"), profiles, DEFAULTS, files, "x")
    with pytest.raises(ProfileInvalid, match=r"profile 'dotted': jsDomain: invalid JetStream"):
        settings_for(spec(account="dotted"), profiles, DEFAULTS, files, "x")
    # The namespace default profile is blamed by its name too.
    with pytest.raises(ProfileInvalid, match="'dotted'"):
        settings_for(spec(), profiles, DEFAULTS, files, "dotted")
    # The spec's own domain replaces the profile's bad one, so nothing is wrong.
    fixed = settings_for(spec(account="dotted", js_domain="hub"), profiles, DEFAULTS, files, "x")
    assert fixed.js_domain == "hub"


def test_tls_first_from_flag_profile_and_spec(tmp_path: Path) -> None:
    """NACK's ``spec.tlsFirst`` overrides a profile's ``tlsFirst``, which overrides the
    operator's ``--tlsfirst``; an explicit false in the spec wins as well."""
    files = FileCache(tmp_path / "cache")
    flagged, _ = parse_args(["--tlsfirst"], {})
    assert flagged.connection.tls_first is True
    assert parse_args([], {})[0].connection.tls_first is False
    defaults = flagged.connection
    profiles = ProfileLookup(
        secrets={},
        configmaps={
            "first": {"tlsFirst": "true", "ca.crt": "-----BEGIN CERTIFICATE-----"},
            "late": {"tlsFirst": " false "},
            "blank": {"tlsFirst": ""},
            "garbled": {"tlsFirst": "maybe"},
        },
    )
    assert settings_for(spec(), profiles, defaults, files, "x").tls_first is True
    assert settings_for(spec(account="late"), profiles, defaults, files, "x").tls_first is False
    assert settings_for(spec(account="blank"), profiles, defaults, files, "x").tls_first is True
    first = settings_for(spec(account="first"), profiles, DEFAULTS, files, "x")
    assert first.tls_first is True and first.tls_ca is not None
    overridden = settings_for(spec(account="first", tlsFirst=False), profiles, DEFAULTS, files, "x")
    assert overridden.tls_first is False
    direct = settings_for(
        spec(tlsFirst=True, tls={"rootCas": ["/etc/nats/ca.pem"]}), profiles, DEFAULTS, files, "x"
    )
    assert (direct.tls_first, direct.tls_ca) == (True, "/etc/nats/ca.pem")
    assert len({first, overridden, DEFAULTS}) == 3  # separate pooled connections
    with pytest.raises(ProfileInvalid, match=r"profile 'garbled': tlsFirst: .*boolean"):
        settings_for(spec(account="garbled"), profiles, DEFAULTS, files, "x")


def test_an_owned_file_cache_is_removed() -> None:
    files = FileCache()
    path = Path(files.path_for("secret", ".key"))
    assert path.exists()
    files.cleanup()
    assert not path.exists()


def test_conditions_keep_their_transition_time_until_the_status_changes() -> None:
    first = merge_conditions(
        None,
        {"Ready": Condition("True", "Exists", "ok"), "InSync": Condition("False", "Drift", "x")},
        1,
        "T1",
    )
    assert [c["type"] for c in first] == ["Ready", "InSync"]
    second = merge_conditions(
        first,
        {
            "Ready": Condition("True", "Exists", "still"),
            "InSync": Condition("True", "InSync", "ok"),
        },
        2,
        "T2",
    )
    ready, in_sync = second
    assert ready["lastTransitionTime"] == "T1" and ready["message"] == "still"
    assert in_sync["lastTransitionTime"] == "T2" and in_sync["observedGeneration"] == 2
    assert len(clip("x" * 5000)) == 1000


def test_flags_and_environment() -> None:
    config, rest = parse_args(
        ["--nats-url", "nats://flag:4222", "--sync-interval", "5", "-A", "--peering=p", "-p", "3"],
        {"NATS_URL": "nats://env:4222", "NATS_TOKEN": "tok", "HEADWATER_METRICS_PORT": "9999"},
    )
    assert config.connection.servers == ("nats://flag:4222",)
    assert config.connection.token == "tok"
    assert config.sync_interval == 5.0 and config.metrics_port == 9999
    assert rest == ["-A", "--peering=p", "-p", "3"]
    assert (config.connection.nkey, config.connection.js_domain) == (None, None)
    flagged, _ = parse_args(
        ["--nkey", "/flag.nk", "--js-domain", "hub"],
        {"NATS_NKEY": "/env.nk", "NATS_JS_DOMAIN": "env"},
    )
    assert (flagged.connection.nkey, flagged.connection.js_domain) == ("/flag.nk", "hub")
    from_env, _ = parse_args([], {"NATS_NKEY": "/env.nk", "NATS_JS_DOMAIN": "env"})
    assert (from_env.connection.nkey, from_env.connection.js_domain) == ("/env.nk", "env")
    defaults, rest = parse_args([], {})
    assert defaults.connection.servers == ConnectionSettings().servers
    assert defaults.metrics_port is None and rest == []
    assert [defaults.backoff(n) for n in (0, 1, 3, 20)] == [1.0, 2.0, 8.0, 300.0]
    assert defaults.cluster_id == ""


def derived_priority(kopf_args: list[str]) -> int | None:
    """The value of the one ``--priority=N`` parse_args added, if any."""
    added = [arg for arg in kopf_args if arg.startswith("--priority=")]
    assert len(added) <= 1, kopf_args
    return int(added[0].split("=", 1)[1]) if added else None


def test_peering_without_priority_derives_one_from_the_pod_name() -> None:
    """Two replicas of the Deployment (same args, same priority) would both pause in kopf's
    peering; a priority hashed from the pod name sets them apart, stably."""
    args = ["--all-namespaces", "--peering=headwater-operator"]
    first_config, first = parse_args(args, {"POD_NAME": "headwater-operator-7d9c-abcde"})
    _, second = parse_args(args, {"POD_NAME": "headwater-operator-7d9c-fghij"})
    _, again = parse_args(args, {"POD_NAME": "headwater-operator-7d9c-abcde"})
    one, other = derived_priority(first), derived_priority(second)
    assert one is not None and other is not None and one != other
    assert derived_priority(again) == one
    assert first[: len(args)] == args
    assert first_config.peering_priority == one
    assert first_config.pod_name == "headwater-operator-7d9c-abcde"
    assert str(one) in first_config.priority_note()
    assert "headwater-operator-7d9c-abcde" in first_config.priority_note()
    # Every spelling of --peering counts, and so does kopf's own environment variable.
    for spelling in (["--peering", "x"], ["-P", "x"], ["-Px"]):
        assert derived_priority(parse_args(spelling, {"POD_NAME": "a"})[1]) is not None
    assert derived_priority(parse_args([], {"POD_NAME": "a", "KOPF_RUN_PEERING": "x"})[1])
    # Without POD_NAME the host name (the pod's name in Kubernetes) is used.
    assert derived_priority(parse_args(args, {"HOSTNAME": "pod-a"})[1]) == derived_priority(
        parse_args(args, {"POD_NAME": "pod-a"})[1]
    )


def test_explicit_priority_standalone_and_no_peering_are_left_alone() -> None:
    env = {"POD_NAME": "headwater-operator-1"}
    for args in (
        ["--peering=p", "--priority=7"],
        ["--peering=p", "--priority", "7"],
        ["-P", "p", "-p", "7"],
        ["--peering=p", "-p7"],
        ["--peering=p", "--standalone"],
        ["--peering=p", "--dev"],  # kopf gives --dev its own priority
        ["--standalone"],
        ["-A"],
        [],
    ):
        config, rest = parse_args(args, env)
        assert rest == args, args
        assert config.peering_priority is None and config.priority_note() == ""
    _, rest = parse_args(["--peering=p"], {**env, "KOPF_RUN_PRIORITY": "5"})
    assert rest == ["--peering=p"]
    _, rest = parse_args(["--peering=p"], {**env, "KOPF_RUN_STANDALONE": "true"})
    assert rest == ["--peering=p"]


def test_cluster_id_flag_and_environment() -> None:
    flagged, _ = parse_args(["--cluster-id", "prod-eu"], {"HEADWATER_CLUSTER_ID": "env"})
    assert flagged.cluster_id == "prod-eu"
    assert parse_args([], {"HEADWATER_CLUSTER_ID": "env"})[0].cluster_id == "env"
    assert owner_of("KeyValue", "ns", "cache") == "kubernetes:ns/keyvalue/cache"
    assert owner_of("Stream", "ns", "orders", "prod") == "kubernetes:prod/ns/stream/orders"
    # A '/' or blank would make the owner ambiguous: refused, from the flag and the env.
    for value in ("a/b", "has space"):
        with pytest.raises(SystemExit):
            parse_args(["--cluster-id", value], {})
        with pytest.raises(SystemExit):
            parse_args([], {"HEADWATER_CLUSTER_ID": value})


async def test_pool_reuses_connections_and_closes_idle_ones(shared_server: ServerProcess) -> None:
    now = [0.0]
    pool = ConnectionPool(idle_timeout=60, clock=lambda: now[0])
    first = ConnectionSettings(servers=(shared_server.url,))
    second = ConnectionSettings(servers=(shared_server.url,), connect_timeout=2.0)
    try:
        client = await pool.get(first)
        assert await pool.get(first) is client
        now[0] = 61.0
        other = await pool.get(second)
        assert client.is_closed and other.is_connected
        assert len(pool) == 1
        await pool.discard(second)
        assert other.is_closed and len(pool) == 0
        assert (await pool.get(first)).is_connected
    finally:
        await pool.close()


async def test_pool_keeps_one_connection_per_domain(shared_server: ServerProcess) -> None:
    pool = ConnectionPool()
    plain = ConnectionSettings(servers=(shared_server.url,))
    hub = plain.model_copy(update={"js_domain": "hub"})
    edge = ConnectionSettings(servers=(shared_server.url,), js_domain="edge")
    try:
        clients = [await pool.get(settings) for settings in (plain, hub, edge)]
        assert len({id(client) for client in clients}) == 3 and len(pool) == 3
        assert [api.prefix_of(client) for client in clients] == [
            "$JS.API",
            "$JS.hub.API",
            "$JS.edge.API",
        ]
        assert (
            await pool.get(ConnectionSettings(servers=(shared_server.url,), js_domain="hub"))
            is clients[1]
        )
    finally:
        await pool.close()
