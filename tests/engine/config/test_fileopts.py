"""Config-file keys -> Settings: names, types, checks, and keys refused or ignored."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Any

import pytest

from headwater.server.config import RANDOM_PORT, AuthSettings, ConfigError, NkeyUser, User

MiB = 1024 * 1024

# Fixed keys (made with the nkeys package) so the parametrized ids stay stable.
NKEY_A = "UDDLVYMLSP73LIMAQ7YFBAG4DPU6C7NU3LNPCEOH4OG2NYRRTVOMY5KU"
NKEY_B = "UBBINIR6LJHFSM5YXSAJUIW4IQCP4QNFF7YCPPGGUHWKI2WCIAHS4UIS"
ACCOUNT_KEY = "ACVV6MH4ROYMPGVWQPXI7RTB2CUMMGTCTVYUFHQZQKIJLXCRC7YWHNBK"
USER_SEED = "SUAHYMBNEFL6DO6AJURUWVHVPVZC3JTBVWV5B4XNSOXCDU75GLYEA3KGSU"


def attr(path: str):
    return operator.attrgetter(path)


TLS_OK = "tls { cert_file: cert.pem, key_file: key.pem }\n"


@pytest.mark.parametrize(
    ("text", "path", "expected"),
    [
        ("host: 127.0.0.1", "host", "127.0.0.1"),
        ("net: 10.1.2.3", "host", "10.1.2.3"),
        ("listen: 127.0.0.1:4333", "host", "127.0.0.1"),
        ("listen: 127.0.0.1:4333", "port", 4333),
        ("listen: localhost:4333", "host", "localhost"),
        ('listen: "[::1]:4333"', "host", "::1"),
        ("listen: 4333", "port", 4333),
        ("listen: 4333", "host", "0.0.0.0"),
        ("listen: :4333", "host", "0.0.0.0"),
        ("port: 4333", "port", 4333),
        ("PORT: 4333", "port", 4333),  # keys are case-insensitive, as in nats-server
        ("port: -1", "port", RANDOM_PORT),
        ("port: 0", "port", 4222),  # zero means the default
        ("server_name: hw-1", "server_name", "hw-1"),
        ("http_port: 8222", "http_port", 8222),
        ("monitor_port: 8222", "http_port", 8222),
        ("http: 8222", "http_port", 8222),
        ("http: localhost:8222", "http_host", "localhost"),
        ("http: localhost:8222", "http_port", 8222),
        ("host: 127.0.0.1\nhttp_port: 8222", "http_host", "127.0.0.1"),
        ("max_payload: 8MB", "max_payload", 8 * MiB),
        ("max_payload: 0", "max_payload", MiB),
        ("max_control_line: 2KB", "max_control_line", 2048),
        ("max_pending: 100MB", "max_pending", 100 * MiB),
        ("max_connections: 1K", "max_connections", 1000),
        ("max_conn: 10", "max_connections", 10),
        ('ping_interval: "30s"', "ping_interval", 30.0),
        ("ping_interval: 1h30m", "ping_interval", 5400.0),
        ("ping_max: 5", "max_pings_out", 5),
        ('write_deadline: "2500ms"', "write_deadline", 2.5),
        ('lame_duck_duration: "1m"', "lame_duck_duration", 60.0),
        ('lame_duck_grace_period: "5s"', "lame_duck_grace_period", 5.0),
        ("pid_file: /run/hw.pid", "pid_file", "/run/hw.pid"),
        ("pidfile: /run/hw.pid", "pid_file", "/run/hw.pid"),
        ("debug: true", "log.debug", True),
        ("trace: on", "log.trace", True),
        ("trace_verbose: yes", "log.trace", True),
        ("logtime: false", "log.log_time", False),
        ("log_file: /var/log/hw.log", "log.log_file", "/var/log/hw.log"),
        ("logfile: /var/log/hw.log", "log.log_file", "/var/log/hw.log"),
        ("authorization { token: s3cret }", "auth.token", "s3cret"),
        ("authorization { user: a, password: b }", "auth.user", "a"),
        ("authorization { username: a, pass: b }", "auth.password", "b"),
        ("authorization { timeout: 5 }", "auth.timeout", 5.0),
        ("authorization { timeout: 0.5 }", "auth.timeout", 0.5),
        ('authorization { timeout: "3s" }', "auth.timeout", 3.0),
        (
            "authorization { users: [{user: a, password: b}, {username: c, pass: d}, {user: e}] }",
            "auth.users",
            (User("a", "b"), User("c", "d"), User("e", "")),
        ),
        ("authorization { users: [] }", "auth.users", ()),
        ("authorization { users: [] }", "auth.nkeys", ()),
        (f"authorization {{ users: [{{nkey: {NKEY_A}}}] }}", "auth.nkeys", (NkeyUser(NKEY_A),)),
        (f"authorization {{ users: [{{nkey: {NKEY_A}}}] }}", "auth.users", ()),
        (f"authorization {{ users: [{{nkey: {NKEY_A}}}] }}", "auth.required", True),
        (
            f"authorization {{ users: [{{nkey: {NKEY_A}}}, {{user: a, password: b}}"
            f", {{NKEY: '{NKEY_B}'}}] }}",
            "auth",
            AuthSettings(
                users=(User("a", "b"),),
                nkeys=(NkeyUser(NKEY_A), NkeyUser(NKEY_B)),
                timeout=2.0,
            ),
        ),
        (TLS_OK, "tls.cert_file", "cert.pem"),
        (TLS_OK, "tls.enabled", True),
        (TLS_OK, "auth.timeout", 3.0),  # nats-server: TLS handshake time + 1 s
        (
            "tls { cert_file: cert.pem, key_file: key.pem, ca_file: ca.pem }",
            "tls.ca_file",
            "ca.pem",
        ),
        ("tls { cert_file: cert.pem, key_file: key.pem, verify: true }", "tls.verify", True),
        (TLS_OK, "tls.handshake_first", False),
        (TLS_OK[:-3] + ", handshake_first: true }", "tls.handshake_first", True),
        (TLS_OK[:-3] + ", handshake_first: false }", "tls.handshake_first", False),
        (TLS_OK[:-3] + ", first: true }", "tls.handshake_first", True),
        (TLS_OK[:-3] + ", immediate: yes }", "tls.handshake_first", True),
        (TLS_OK[:-3] + ', handshake_first: "on" }', "tls.handshake_first", True),
        (TLS_OK[:-3] + ', Handshake_First: "Off" }', "tls.handshake_first", False),
        ("tls { cert_file: cert.pem, key_file: key.pem, timeout: 5 }", "tls.timeout", 5.0),
        ('tls { cert_file: cert.pem, key_file: key.pem, timeout: "1s" }', "tls.timeout", 1.0),
        ("jetstream: true", "jetstream.enabled", True),
        ("jetstream: false", "jetstream.enabled", False),
        ("jetstream: enabled", "jetstream.enabled", True),
        ("jetstream: Enabled", "jetstream.enabled", True),
        ('jetstream: "disabled"', "jetstream.enabled", False),
        ("jetstream {}", "jetstream.enabled", True),
        ("jetstream { enabled: false }", "jetstream.enabled", False),
        ("jetstream { store_dir: /data/js }", "jetstream.store_dir", "/data/js"),
        ("jetstream { store: /data/js }", "jetstream.store_dir", "/data/js"),
        ("Jetstream { Store_Dir: /data/js }", "jetstream.store_dir", "/data/js"),
        ("store_dir: /data/js", "jetstream.store_dir", "/data/js"),
        ("store_dir: /data/js", "jetstream.enabled", False),
        ("jetstream { max_mem: 1G }", "jetstream.max_memory_store", 1_000_000_000),
        ("jetstream { max_memory_store: 1GB }", "jetstream.max_memory_store", 1024 * MiB),
        ('jetstream { max_mem: "1G" }', "jetstream.max_memory_store", 1024 * MiB),
        ('jetstream { max_file: "10G" }', "jetstream.max_file_store", 10 * 1024 * MiB),
        ("jetstream { max_file_store: 1TB }", "jetstream.max_file_store", 1024**4),
        ("jetstream { max_file_store: -1 }", "jetstream.max_file_store", -1),
        ("jetstream { sync_interval: always }", "jetstream.sync_interval", -1.0),
        ('jetstream { sync_interval: "Always" }', "jetstream.sync_interval", -1.0),
        ('jetstream { sync_interval: "2m" }', "jetstream.sync_interval", 120.0),
        ("jetstream { sync: 10s }", "jetstream.sync_interval", 10.0),
        ("jetstream { domain: hub }", "jetstream.domain", "hub"),
        ("jetstream { snapshot_format: NATS }", "jetstream.snapshot_format", "nats"),
        ("jetstream { store_dir: /x }", "jetstream.snapshot_format", "headwater"),
        ("cluster { name: c1 }", "cluster.name", "c1"),
        ("cluster { listen: 0.0.0.0:6222 }", "cluster.port", 6222),
        ("cluster { listen: 0.0.0.0:6222 }", "cluster.host", "0.0.0.0"),
        ("cluster { host: 10.0.0.1, port: -1 }", "cluster.port", -1),
        ("cluster { net: 10.0.0.1 }", "cluster.host", "10.0.0.1"),
        (
            "cluster { routes: [nats://a:6222\n nats://b:6222] }",
            "cluster.routes",
            ("nats://a:6222", "nats://b:6222"),
        ),
        ("cluster { no_advertise: true }", "cluster.no_advertise", True),
        ("cluster { connect_retries: 3 }", "cluster.connect_retries", 3),
        ("P = 4333\nport: $P", "port", 4333),
        ("authorization { t = 3, timeout: $t }", "auth.timeout", 3.0),
    ],
)
def test_file_keys(conf, text: str, path: str, expected: Any) -> None:
    result = conf(text + "\n")
    assert result.action == "run"
    assert attr(path)(result.settings) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('port: "abc"', "x.conf:1:7: port: expected an integer, got string 'abc'"),
        ("port: 1.5", "x.conf:1:7: port: expected an integer, got float 1.5"),
        ("port: true", "x.conf:1:7: port: expected an integer, got boolean true"),
        ("port: 99999", "x.conf:1:7: port: port 99999 is out of range"),
        ("port: [1]", "x.conf:1:7: port: expected an integer, got an array"),
        ("\n\n  debug: 1", "x.conf:3:10: debug: expected a boolean"),
        (
            'debug: "true"',
            "x.conf:1:8: debug: expected a boolean (true/false, yes/no, on/off), got",
        ),
        ("server_name: 5", "x.conf:1:14: server_name: expected a string, got integer 5"),
        ('server_name: "a b"', "x.conf:1:14: server_name: server name cannot contain spaces"),
        ("host: {}", "x.conf:1:7: host: expected a string, got a block"),
        ("max_payload: 1.5", "x.conf:1:14: max_payload: expected an integer"),
        ("max_payload: 3GB", "x.conf:1:14: max_payload: value 3221225472 is too big"),
        ("max_pending: -1", "x.conf:1:14: max_pending: must not be negative"),
        ("ping_interval: true", "x.conf:1:16: ping_interval: expected a duration"),
        ('ping_interval: "1y"', 'x.conf:1:16: ping_interval: time: unknown unit "y"'),
        ('ping_interval: ""', 'x.conf:1:16: ping_interval: time: invalid duration ""'),
        ('ping_interval: "-5s"', "x.conf:1:16: ping_interval: must not be negative"),
        ("lame_duck_duration: 60", "x.conf:1:21: lame_duck_duration: expected a string"),
        ('lame_duck_duration: "10s"', "x.conf:1:21: lame_duck_duration: must be at least 30"),
        ('lame_duck_grace_period: "-1s"', "x.conf:1:25: lame_duck_grace_period: must not be"),
        ("listen: 1.2.3", "x.conf:1:9: listen: could not parse address string '1.2.3'"),
        ("listen: a:b", "x.conf:1:9: listen: could not parse port 'b'"),
        ("listen: true", "x.conf:1:9: listen: expected a port or host:port"),
        ("http: [8222]", "x.conf:1:7: http: expected a port or host:port, got an array"),
        ("authorization: 5", "x.conf:1:16: authorization: expected a block { ... }"),
        (
            "authorization { users: {user: a} }",
            "x.conf:1:24: authorization.users: expected an array of users, got a block",
        ),
        ("authorization { users: [5] }", "x.conf:1:25: authorization.users[0]: expected a block"),
        (
            "authorization { users: [{password: b}] }",
            "x.conf:1:25: authorization.users[0]: a user entry needs a user",
        ),
        (
            "authorization { users: [{user: a}, {user: a}] }",
            "x.conf:1:36: authorization.users[1]: duplicate user 'a'",
        ),
        (
            "authorization { user: a, token: t }",
            "x.conf:1:15: authorization: cannot have both a user/password and a token",
        ),
        (
            "authorization { user: a, users: [] }",
            "x.conf:1:15: authorization: cannot have both a single user and a users array",
        ),
        (
            "authorization { token: t, users: [{user: a}] }",
            "x.conf:1:15: authorization: cannot have both a token and a users array",
        ),
        ("authorization { password: p }", "a password was set without a user"),
        ("authorization { timeout: true }", "x.conf:1:26: authorization.timeout: expected"),
        ("tls: 5", "x.conf:1:6: tls: expected a block"),
        (
            "tls { cert_file: cert.pem, key_file: key.pem, verify: yes\n timeout: [] }",
            "x.conf:2:11: tls.timeout: expected seconds or a duration",
        ),
        ("tls { verify: true }", "x.conf:1:5: tls: cert_file is required to serve TLS"),
        ("tls { cert_file: cert.pem }", "x.conf:1:5: tls: key_file is required to serve TLS"),
        (
            "tls { cert_file: nope.pem, key_file: key.pem }",
            "x.conf:1:18: tls.cert_file: file 'nope.pem' does not exist",
        ),
        (
            "tls { cert_file: cert.pem, key_file: key.pem, ca_file: '.' }",
            "x.conf:1:56: tls.ca_file: '.' is not a file",
        ),
        ("jetstream: foo", "x.conf:1:12: jetstream: expected 'enabled' or 'disabled', got 'foo'"),
        ("jetstream: 5", "x.conf:1:12: jetstream: expected a block, a boolean or"),
        ('jetstream { max_mem: "1GB" }', "x.conf:1:22: jetstream.max_mem: invalid size '1GB'"),
        ("jetstream { max_mem: 1.5 }", "x.conf:1:22: jetstream.max_mem: expected an integer"),
        ('jetstream { sync_interval: "x" }', "x.conf:1:28: jetstream.sync_interval: time: invalid"),
        ('jetstream { enabled: "yes" }', "x.conf:1:22: jetstream.enabled: expected a boolean"),
        ("jetstream { store_dir: 5 }", "x.conf:1:24: jetstream.store_dir: expected a string"),
        (
            "store_dir: /a\njetstream { store_dir: /b }",
            "x.conf:2:13: duplicate 'store_dir' configuration (first at x.conf:1:1)",
        ),
        ("cluster: 5", "x.conf:1:10: cluster: expected a block"),
        ('cluster { routes: "nats://a:1" }', "x.conf:1:19: cluster.routes: expected an array"),
        (
            "cluster { routes: [nats://a:1, not-a-url] }",
            "x.conf:1:32: cluster.routes[1]: invalid route URL 'not-a-url'",
        ),
        (
            "cluster { routes: ['nats://a:b'] }",
            "x.conf:1:20: cluster.routes[0]: invalid route URL 'nats://a:b'",
        ),
        ('cluster { name: "a b" }', "x.conf:1:17: cluster.name: cluster name cannot contain"),
        ("max_payload: 2MB\nmax_pending: 1MB", "max_payload (2097152) cannot be higher than"),
        ("foo: 1", 'x.conf:1:1: unknown field "foo"'),
        ("monitor: 8222", 'x.conf:1:1: unknown field "monitor"'),
        ("include: a.conf", 'x.conf:1:1: unknown field "include"'),
        ("jetstream { max_bytes: 1 }", 'x.conf:1:13: unknown field "jetstream.max_bytes"'),
        ("authorization { nkeys: [] }", 'unknown field "authorization.nkeys"'),
        ("authorization { nkey: UABC }", 'unknown field "authorization.nkey"'),
        (
            "authorization { users: [{nkey: UABC}] }",
            "x.conf:1:25: authorization.users[0].nkey: not a valid public nkey for a user: 'UABC'",
        ),
        (
            f"authorization {{ users: [{{nkey: {ACCOUNT_KEY}}}] }}",
            "authorization.users[0].nkey: not a valid public nkey for a user",
        ),
        (
            f"authorization {{ users: [{{nkey: {USER_SEED}}}] }}",
            "authorization.users[0].nkey: not a valid public nkey for a user",
        ),
        ("authorization { users: [{nkey: 5}] }", "authorization.users[0].nkey: expected a string"),
        (
            f"authorization {{ users: [{{nkey: {NKEY_A}, user: a}}] }}",
            "x.conf:1:25: authorization.users[0]: nkey users do not take usernames or passwords",
        ),
        (
            f"authorization {{ users: [{{nkey: {NKEY_A}, password: p}}] }}",
            "authorization.users[0]: nkey users do not take usernames or passwords",
        ),
        (
            f"authorization {{ users: [{{nkey: {NKEY_A}}}, {{nkey: {NKEY_A}}}] }}",
            f"authorization.users[1]: duplicate nkey '{NKEY_A}'",
        ),
        (
            f"authorization {{ token: t, users: [{{nkey: {NKEY_A}}}] }}",
            "authorization: cannot have both a token and a users array",
        ),
        (
            f"authorization {{ user: a, password: b, users: [{{nkey: {NKEY_A}}}] }}",
            "authorization: cannot have both a single user and a users array",
        ),
        (
            TLS_OK[:-3] + ", handshake_first: 5 }",
            "tls.handshake_first: expected a boolean or a string, got integer 5",
        ),
        (
            TLS_OK[:-3] + ', handshake_first: "maybe" }',
            "tls.handshake_first: value 'maybe' is invalid",
        ),
        (
            TLS_OK[:-3] + ', handshake_first: "auto" }',
            "tls.handshake_first: 'auto' (TLS-first with a fallback to plaintext INFO) is not "
            "supported by headwater-server",
        ),
        (
            TLS_OK[:-3] + ', handshake_first: "300ms" }',
            "tls.handshake_first: '300ms' (TLS-first with a fallback to plaintext INFO) is not",
        ),
        (
            "authorization { users: [{user: a, foo: 1}] }",
            'x.conf:1:35: unknown field "authorization.users[0].foo"',
        ),
        ("tls { foo: 1 }", 'x.conf:1:7: unknown field "tls.foo"'),
        (
            "jetstream { snapshot_format: tar }",
            "jetstream.snapshot_format: expected one of headwater, nats, got 'tar'",
        ),
        ("cluster { foo: 1 }", 'x.conf:1:11: unknown field "cluster.foo"'),
    ],
)
def test_value_errors_name_file_line_and_key(conf, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        conf(text + "\n")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "feature"),
    [
        ("accounts { A: {} }", "'accounts' (multiple accounts)"),
        ("mappings { a: b }", "'mappings' (subject mappings)"),
        ("operator: op.jwt", "'operator' (operator (JWT) authentication)"),
        ("resolver: MEMORY", "'resolver' (account resolvers (JWT))"),
        ("authorization { permissions: {} }", "'authorization.permissions' (permissions)"),
        (
            "authorization { users: [{user: a, permissions: {publish: x}}] }",
            "'authorization.users[0].permissions' (permissions)",
        ),
        ("tls { verify_and_map: true }", "'tls.verify_and_map' (certificate-based identities"),
        ("jetstream { cipher: aes, key: k }", "'jetstream.cipher' (encryption at rest)"),
        # Routes in clear where the config asks for TLS would expose every message.
        ("cluster { port: 6222, permissions: {} }", "'cluster.permissions' (route import"),
        ("cluster { port: 6222, authorization { token: t } }", "'cluster.authorization.token'"),
    ],
)
def test_keys_that_would_weaken_protection_are_refused(conf, text: str, feature: str) -> None:
    with pytest.raises(ConfigError, match="is not supported by headwater-server") as info:
        conf(text + "\n")
    assert feature in str(info.value)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("websocket { port: 8080 }", "websocket"),
        ("leafnodes { port: 7422 }", "leafnodes"),
        ("mqtt { port: 1883 }", "mqtt"),
        ("syslog: true", "syslog"),
        ("max_subs: 100", "max_subs"),
        ("cluster { connect_backoff: true }", "cluster.connect_backoff"),
        ("jetstream { unique_tag: az }", "jetstream.unique_tag"),
        ("tls { cert_file: cert.pem, key_file: key.pem, cipher_suites: [x] }", "tls.cipher_suites"),
    ],
)
def test_keys_without_effect_are_accepted_with_a_notice(conf, text: str, key: str) -> None:
    result = conf(text + "\n")
    assert result.action == "run"
    assert len(result.warnings) == 1
    assert f"'{key}' has no effect in headwater-server" in result.warnings[0]
    assert result.warnings[0].startswith("x.conf:1:")


def test_variables_are_not_unknown_fields(conf) -> None:
    assert conf("MY_PORT = 4333\nport: $MY_PORT\n").settings.port == 4333
    with pytest.raises(ConfigError, match='unknown field "UNUSED"'):
        conf("UNUSED = 1\nport: 1\n")


def test_include_and_environment_reach_settings(
    conf, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "auth.conf").write_text("authorization { token: $HW_TOKEN }\n")
    monkeypatch.setenv("HW_TOKEN", "from-env")
    assert conf("include auth.conf\n").settings.auth.token == "from-env"


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        ("ping_interval: 45", 'x.conf:1:16: ping_interval should be a duration such as "30s"'),
        ("write_deadline: 3", "x.conf:1:17: write_deadline should be a duration"),
        ("jetstream { sync_interval: 10 }", "x.conf:1:28: jetstream.sync_interval should be"),
        ("ping_interval: 2m", "x.conf:1:16: ping_interval should be a duration"),
        ("# nothing", "x.conf: config has no values or is empty"),
    ],
)
def test_nats_server_warnings_load_but_fail_t(conf, text: str, warning: str) -> None:
    result = conf(text + "\n")
    assert result.action == "run"
    assert any(line.startswith(warning) for line in result.warnings), result.warnings
    with pytest.raises(ConfigError, match=warning.replace("(", r"\(")):
        conf(text + "\n", "-t")


def test_integer_intervals_count_seconds(conf) -> None:
    assert conf("ping_interval: 45\n").settings.ping_interval == 45.0
    # Unquoted 2m is the integer 2,000,000 in nats-server's grammar (m = mega), not minutes.
    assert conf("ping_interval: 2m\n").settings.ping_interval == 2_000_000.0


def test_server_tags_and_an_external_etcd(conf) -> None:
    loaded = conf("server_tags: [az:1, ssd]\ncluster { port: 6222, etcd: [http://e:2379] }\n")
    assert loaded.settings.server_tags == ("az:1", "ssd")
    assert loaded.settings.cluster.etcd == ("http://e:2379",)
    assert conf('server_tags: "a, b"\n').settings.server_tags == ("a", "b")
