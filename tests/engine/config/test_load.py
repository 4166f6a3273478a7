"""``load(argv)``: flags over the config file, and the ``-t``, ``-h`` and ``-v`` actions."""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import pytest

from headwater import __version__
from headwater.server.config import RANDOM_PORT, ConfigError, LoadResult, Settings, load

MiB = 1024 * 1024


def attr(path: str):
    return operator.attrgetter(path)


TLS_OK = "tls { cert_file: cert.pem, key_file: key.pem }\n"


def test_defaults_without_a_file() -> None:
    result = load([])
    assert result == LoadResult(Settings(), "run")
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.action = "help"  # type: ignore[misc]


def test_untouched_settings_keep_their_defaults(conf) -> None:
    assert conf("port: 4333\n").settings == dataclasses.replace(Settings(), port=4333)


class TestFlagsOverrideTheFile:
    @pytest.mark.parametrize(
        ("text", "flags", "path", "expected"),
        [
            ("port: 5000", ["-p", "6000"], "port", 6000),
            ("port: 5000", ["--port=6000"], "port", 6000),
            ("port: 5000", ["-p", "0"], "port", 5000),  # 0 = not given, as in nats-server
            ("port: 5000", ["-p", "-1"], "port", RANDOM_PORT),
            ("listen: 127.0.0.1:5000", ["-p", "6000"], "host", "127.0.0.1"),
            ("listen: 127.0.0.1:5000", ["-a", "0.0.0.0"], "host", "0.0.0.0"),
            ("listen: 127.0.0.1:5000", ["-a", ""], "host", "127.0.0.1"),
            ("listen: 127.0.0.1:5000", ["--net", "10.0.0.1"], "port", 5000),
            ("server_name: a", ["-n", "b"], "server_name", "b"),
            ("server_name: a", ["--server_name=c"], "server_name", "c"),
            ("http_port: 8222", ["-m", "8333"], "http_port", 8333),
            ("pid_file: /a", ["-P", "/b"], "pid_file", "/b"),
            ("log_file: /a", ["-l", "/b"], "log.log_file", "/b"),
            ("jetstream: disabled", ["-js"], "jetstream.enabled", True),
            ("jetstream: enabled", ["-js=false"], "jetstream.enabled", False),
            ("jetstream { store_dir: /a }", ["-sd", "/b"], "jetstream.store_dir", "/b"),
            ("jetstream { store_dir: /a }", ["-sd=/b"], "jetstream.enabled", True),
            ("debug: true", ["-D=false"], "log.debug", False),
            ("debug: false", ["-D"], "log.debug", True),
            ("trace: false", ["-V"], "log.trace", True),
            ("trace: false", ["-VV"], "log.trace", True),
            ("debug: false", ["-DV"], "log.debug", True),
            ("trace: false", ["-DV"], "log.trace", True),
            ("trace: false", ["-DVV"], "log.trace", True),
            ("debug: true\ntrace: true", ["-DV=false"], "log.trace", False),
            ("logtime: true", ["-T=false"], "log.log_time", False),
            ("logtime: false", [], "log.log_time", False),
            ("authorization { token: a }", ["--auth", "b"], "auth.token", "b"),
            ("authorization { user: a, password: b }", ["--user", "c"], "auth.user", "c"),
            ("authorization { user: a, password: b }", ["--user", "c"], "auth.password", "b"),
            ("authorization { user: a, password: b }", ["--pass", "d"], "auth.password", "d"),
            ("cluster { name: a }", ["--cluster_name", "b"], "cluster.name", "b"),
            (
                "cluster { listen: 0.0.0.0:6222 }",
                ["--cluster", "nats://1.2.3.4:7222"],
                "cluster.host",
                "1.2.3.4",
            ),
            (
                "cluster { listen: 0.0.0.0:6222 }",
                ["--cluster_listen", "nats://:7222"],
                "cluster.port",
                7222,
            ),
            (
                "cluster { listen: 0.0.0.0:6222 }",
                ["--cluster", "nats://0.0.0.0:-1"],
                "cluster.port",
                -1,
            ),
            ("cluster { listen: 0.0.0.0:6222 }", ["--cluster", ""], "cluster.port", 0),
            (
                "cluster { port: 6222, routes: [nats://a:1] }",
                ["--routes", "nats://b:1, nats://c:1"],
                "cluster.routes",
                ("nats://b:1", "nats://c:1"),
            ),
            (
                "cluster { port: 6222, routes: [nats://a:1] }",
                ["--routes", ""],
                "cluster.routes",
                (),
            ),
            ("cluster { no_advertise: false }", ["--no_advertise"], "cluster.no_advertise", True),
            (
                "cluster { connect_retries: 1 }",
                ["--connect_retries", "5"],
                "cluster.connect_retries",
                5,
            ),
            (TLS_OK, ["--tls=false"], "tls.enabled", False),
            (TLS_OK, ["--tls=false", "--tlscert", "cert.pem"], "tls.cert_file", None),
            (
                "tls { cert_file: ca.pem, key_file: ca.pem, timeout: 7 }",
                ["--tlscert", "cert.pem", "--tlskey", "key.pem"],
                "tls.cert_file",
                "cert.pem",
            ),
            (
                "tls { cert_file: ca.pem, key_file: ca.pem, timeout: 7 }",
                ["--tlscert", "cert.pem", "--tlskey", "key.pem"],
                "tls.timeout",
                7.0,
            ),
            (
                "port: 1",
                ["--tls", "--tlscert", "cert.pem", "--tlskey", "key.pem"],
                "tls.enabled",
                True,
            ),
            (
                "port: 1",
                [
                    "--tlsverify",
                    "--tlscert",
                    "cert.pem",
                    "--tlskey",
                    "key.pem",
                    "--tlscacert",
                    "ca.pem",
                ],
                "tls.verify",
                True,
            ),
            (
                "port: 1",
                ["--tlscert", "cert.pem", "--tlskey", "key.pem", "--tlscacert", "ca.pem"],
                "tls.ca_file",
                "ca.pem",
            ),
        ],
    )
    def test_flag_wins(self, conf, text: str, flags: list[str], path: str, expected: Any) -> None:
        assert attr(path)(conf(text + "\n", *flags).settings) == expected

    def test_without_a_file(self) -> None:
        settings = load(["-p", "-1", "-a", "127.0.0.1", "-m", "8222", "-js", "-sd", "/tmp/js"])
        assert settings.settings.port == RANDOM_PORT
        assert settings.settings.http_host == "127.0.0.1"  # monitoring follows -a
        assert settings.settings.jetstream.enabled
        assert settings.settings.jetstream.store_dir == "/tmp/js"

    def test_store_dir_alone_does_not_enable_jetstream(self) -> None:
        assert not load(["-sd", "/tmp/js"]).settings.jetstream.enabled

    @pytest.mark.parametrize(
        ("text", "flags", "message"),
        [
            (
                "authorization { token: t }",
                ["--user", "u", "--pass", "p"],
                "cannot have both a user/password and a token",
            ),
            (
                "authorization { users: [{user: a}] }",
                ["--user", "u"],
                "cannot have both a single user and a users array",
            ),
            (
                "authorization { users: [{user: a}] }",
                ["--auth", "t"],
                "cannot have both a token and a users array",
            ),
            ("port: 1", ["--pass", "p"], "a password was set without a user"),
            ("port: 1", ["--tls"], "TLS from flags needs both --tlscert and --tlskey"),
            ("port: 1", ["--tlscert", "cert.pem"], "TLS from flags needs both --tlscert and"),
            (
                "port: 1",
                ["--tlscert", "nope.pem", "--tlskey", "key.pem"],
                "invalid value \"nope.pem\" for flag -tlscert: file 'nope.pem' does not exist",
            ),
            (
                "port: 1",
                ["--routes", "nats://a:1"],
                "solicited routes require cluster capabilities, e.g. --cluster",
            ),
            (
                "port: 1",
                ["--routes", "not a url", "--cluster", "nats://:1"],
                'invalid value "not a url" for flag -routes: invalid route URL',
            ),
            (
                "port: 1",
                ["--cluster", "0.0.0.0:6222"],
                'invalid value "0.0.0.0:6222" for flag -cluster: expected a URL such as',
            ),
            (
                "port: 1",
                ["--cluster", "nats://a:b"],
                'invalid value "nats://a:b" for flag -cluster',
            ),
            ("port: 1", ["-p", "70000"], 'invalid value "70000" for flag -p: port 70000 is out of'),
            ("port: 1", ["-n", "a b"], "for flag -n: server name cannot contain spaces"),
            ("port: 1", ["--connect_retries", "-2"], "for flag -connect_retries: must not be"),
            ("max_pending: 1M", ["-p", "1"], "max_payload (1048576) cannot be higher than"),
        ],
    )
    def test_conflicts(self, conf, text: str, flags: list[str], message: str) -> None:
        with pytest.raises(ConfigError) as info:
            conf(text + "\n", *flags)
        assert message in str(info.value)


class TestActions:
    @pytest.mark.parametrize(
        "argv", [["-v"], ["--version"], ["-version"], ["version"], ["VERSION"], ["-h", "-v"]]
    )
    def test_version(self, argv: list[str]) -> None:
        result = load(argv)
        assert result.action == "version"
        assert result.text == f"headwater-server: v{__version__}"

    @pytest.mark.parametrize("argv", [["-h"], ["--help"], ["-help"], ["help"], ["-p", "1", "help"]])
    def test_help(self, argv: list[str]) -> None:
        result = load(argv)
        assert result.action == "help"
        assert "-p, --port <port>" in result.text

    def test_help_tls(self) -> None:
        result = load(["--help_tls"])
        assert result.action == "help"
        assert "cert_file" in result.text

    def test_help_does_not_read_the_config(self) -> None:
        assert load(["-c", "/does/not/exist.conf", "-h"]).action == "help"

    def test_flag_errors_come_before_help(self) -> None:
        with pytest.raises(ConfigError, match="flag provided but not defined: -foo"):
            load(["-h", "-foo"])

    def test_unrecognized_command(self) -> None:
        with pytest.raises(ConfigError, match=r'^unrecognized command: "serve"$'):
            load(["-p", "1", "serve"])

    def test_t_reports_a_valid_file(self, conf) -> None:
        result = conf("port: 4333\n", "-t")
        assert result.action == "test_config"
        assert result.text == "configuration file x.conf is valid"
        assert result.settings.port == 4333

    def test_t_with_keys_without_effect_is_still_valid(self, conf) -> None:
        result = conf("websocket { port: 1 }\n", "-t")
        assert result.action == "test_config"
        assert "websocket" in result.warnings[0]

    def test_t_needs_a_file(self) -> None:
        with pytest.raises(ConfigError, match="-t checks a configuration file: give it with -c"):
            load(["-t"])

    def test_t_with_an_error(self, conf) -> None:
        with pytest.raises(ConfigError, match=r"^x.conf:2:1: unexpected '}'$"):
            conf("port: 1\n}\n", "-t")

    def test_missing_config_file(self) -> None:
        with pytest.raises(ConfigError, match=r"cannot read configuration file '/nope/x\.conf'"):
            load(["-c", "/nope/x.conf"])

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["-sl", "stop"], "flag -sl (signalling a running server) is not supported"),
            (["--signal=reload"], "flag -signal (signalling a running server) is not supported"),
            (["--ports_file_dir", "/tmp"], "flag -ports_file_dir (ports files) is not supported"),
        ],
    )
    def test_refused_flags(self, argv: list[str], message: str) -> None:
        with pytest.raises(ConfigError) as info:
            load(argv)
        assert str(info.value).startswith(message)

    @pytest.mark.parametrize(
        "argv",
        [
            ["-ms", "8443"],
            ["--logtime_utc"],
            ["-s"],
            ["-r", "udp://x:514"],
            ["--log_size_limit", "100"],
            ["--max_traced_msg_len", "10"],
            ["--profile", "6060"],
        ],
    )
    def test_ignored_flags_load_with_a_notice(self, argv: list[str]) -> None:
        result = load(argv)
        assert result.settings == Settings()
        name = argv[0].lstrip("-")
        assert result.warnings == (
            f"flag -{name} has no effect in headwater-server (accepted for nats-server "
            "compatibility)",
        )
