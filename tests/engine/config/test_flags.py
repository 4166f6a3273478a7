"""Command-line flags: nats-server's flag set, parsed with Go's ``flag`` package rules."""

from __future__ import annotations

import pytest

from headwater.server.config import ConfigError
from headwater.server.config.flags import (
    FLAGS,
    FlagSpec,
    help_text,
    parse_flags,
    parse_go_bool,
    parse_go_int,
)

SUPPORTED = [spec for spec in FLAGS if spec.support == "yes"]
SAMPLE = {"str": ("some-value", "some-value"), "int": ("42", 42)}


def spellings(spec: FlagSpec) -> list[tuple[str, str]]:
    return [(spec.dest, name) for name in spec.names]


#: Every spelling of every supported flag (dest, name), e.g. ("port", "p"), ("port", "port").
ALL_NAMES = [pair for spec in SUPPORTED for pair in spellings(spec)]
KIND = {spec.dest: spec.kind for spec in FLAGS}


#: Every flag nats-server 2.15 defines (``nats-server -h`` and server/opts.go).
NATS_SERVER_FLAGS = """
    a addr net p port n name server_name P pid m http_port ms https_port c config t sl signal
    client_advertise ports_file_dir l log T logtime logtime_utc s syslog r remote_syslog D debug
    V trace VV DV DVV log_size_limit max_traced_msg_len js jetstream sd store_dir user pass auth
    tls tlscert tlskey tlsverify tlscacert routes cluster cluster_listen cluster_name
    no_advertise cluster_advertise connect_retries profile h help v version help_tls
"""


def test_the_flag_set_is_nats_servers() -> None:
    names = [name for spec in FLAGS for name in spec.names]
    assert len(names) == len(set(names))
    assert set(names) == set(NATS_SERVER_FLAGS.split())


@pytest.mark.parametrize("dashes", ["-", "--"])
@pytest.mark.parametrize("form", ["separate", "equals"])
@pytest.mark.parametrize(("dest", "name"), ALL_NAMES)
def test_every_flag_in_every_syntax(dest: str, name: str, dashes: str, form: str) -> None:
    kind = KIND[dest]
    if kind == "bool":
        argv = [f"{dashes}{name}"] if form == "separate" else [f"{dashes}{name}=true"]
        assert parse_flags(argv).values == {dest: True}
        assert parse_flags([f"{dashes}{name}=false"]).values == {dest: False}
        return
    text, value = SAMPLE[kind]
    argv = [f"{dashes}{name}", text] if form == "separate" else [f"{dashes}{name}={text}"]
    parsed = parse_flags(argv)
    assert parsed.values == {dest: value}
    assert parsed.spelled == {dest: name}
    assert parsed.positionals == ()


@pytest.mark.parametrize(
    ("argv", "values"),
    [
        (["-sd=/data/js"], {"store_dir": "/data/js"}),
        (["--store_dir", "/data/js"], {"store_dir": "/data/js"}),
        (["-p", "-1"], {"port": -1}),  # a value may start with '-'
        (["-p=-1"], {"port": -1}),
        (["-a", ""], {"host": ""}),
        (["--auth="], {"token": ""}),
        (["-user", "a=b"], {"user": "a=b"}),
        (["-user=a=b"], {"user": "a=b"}),
        (["-p", "1", "-p", "2"], {"port": 2}),  # the last one wins
        (["-p", "1", "--port=3"], {"port": 3}),
        (["-js", "-sd", "/x", "-DV"], {"jetstream": True, "store_dir": "/x", "debug_trace": True}),
        (["-T=false"], {"logtime": False}),
        (["-js=0"], {"jetstream": False}),
        (["-js=T"], {"jetstream": True}),
        (["-p", "0x1F"], {"port": 31}),
    ],
)
def test_values(argv: list[str], values: dict[str, object]) -> None:
    assert parse_flags(argv).values == values


@pytest.mark.parametrize(
    ("argv", "values", "positionals"),
    [
        (["-p", "1", "version"], {"port": 1}, ("version",)),
        (["version", "-p", "1"], {}, ("version", "-p", "1")),
        (["-p", "1", "--", "-D"], {"port": 1}, ("-D",)),
        (["--", "--"], {}, ("--",)),
        (["-", "-D"], {}, ("-", "-D")),
        (["-js", "false"], {"jetstream": True}, ("false",)),  # bools take no separate value
        ([], {}, ()),
    ],
)
def test_parsing_stops_at_the_first_non_flag(
    argv: list[str], values: dict[str, object], positionals: tuple[str, ...]
) -> None:
    parsed = parse_flags(argv)
    assert parsed.values == values
    assert parsed.positionals == positionals


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-foo"], "flag provided but not defined: -foo"),
        (["--foo=1"], "flag provided but not defined: -foo"),
        (["-p", "1", "--max_payload", "1"], "flag provided but not defined: -max_payload"),
        (["--http", "x:1"], "flag provided but not defined: -http"),
        (["-ping_interval", "2m"], "flag provided but not defined: -ping_interval"),
        (["-Port", "1"], "flag provided but not defined: -Port"),  # names are case-sensitive
        (["-p", "abc"], 'invalid value "abc" for flag -p: parse error'),
        (["--port=abc"], 'invalid value "abc" for flag -port: parse error'),
        (["-p", "-t"], 'invalid value "-t" for flag -p: parse error'),
        (["-p", "4222.5"], 'invalid value "4222.5" for flag -p: parse error'),
        (["-m", ""], 'invalid value "" for flag -m: parse error'),
        (
            ["-p", "99999999999999999999"],
            'invalid value "99999999999999999999" for flag -p: value out of range',
        ),
        (["-connect_retries", "x"], 'invalid value "x" for flag -connect_retries: parse error'),
        (["-p"], "flag needs an argument: -p"),
        (["--config"], "flag needs an argument: -config"),
        (["-js=maybe"], 'invalid boolean value "maybe" for -js: parse error'),
        (["--tlsverify=yes"], 'invalid boolean value "yes" for -tlsverify: parse error'),
        (["---p", "5"], "bad flag syntax: ---p"),
        (["-=5"], "bad flag syntax: -=5"),
        (["--=5"], "bad flag syntax: --=5"),
    ],
)
def test_errors_in_go_flag_wording(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_flags(argv)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("4222", 4222),
        ("+5", 5),
        ("-1", -1),
        ("0x10", 16),
        ("0X10", 16),
        ("0o17", 15),
        ("017", 15),  # a leading 0 means octal, as in Go
        ("0b101", 5),
        ("1_000", 1000),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
    ],
)
def test_go_int_parsing(text: str, value: int) -> None:
    assert parse_go_int(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "parse error"),
        ("-", "parse error"),
        (" 5", "parse error"),
        ("5 ", "parse error"),
        ("0x", "parse error"),
        ("08", "parse error"),
        ("1__0", "parse error"),
        ("_1", "parse error"),
        ("1_", "parse error"),
        ("1e3", "parse error"),
        ("9223372036854775808", "value out of range"),
    ],
)
def test_go_int_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_go_int(text)


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_go_true(text: str) -> None:
    assert parse_go_bool(text) is True


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_go_false(text: str) -> None:
    assert parse_go_bool(text) is False


@pytest.mark.parametrize("text", ["yes", "on", "tRUE", "", "2"])
def test_go_bool_errors(text: str) -> None:
    with pytest.raises(ValueError, match="parse error"):
        parse_go_bool(text)


def test_help_lists_every_supported_flag() -> None:
    text = help_text()
    assert text.startswith("Usage: headwater-server [options]")
    for spec in SUPPORTED:
        for name in spec.names:
            assert f"-{name}" in text, name
    assert "--signal" not in text and "--ports_file_dir" not in text
    assert max(len(line) for line in text.splitlines()) <= 100
