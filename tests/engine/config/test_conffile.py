"""The config-file parser: every syntax form nats-server accepts, includes, variables, errors."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from headwater.server.config import ConfigError, Position
from headwater.server.config.conffile import Node, parse_file, parse_text, to_plain


def plain(text: str) -> Any:
    return to_plain(parse_text(text, "t.conf"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("port: 4222", {"port": 4222}),
        ("port = 4222", {"port": 4222}),
        ("port 4222", {"port": 4222}),
        ("port:4222", {"port": 4222}),
        ("port=4222", {"port": 4222}),
        ("port\t \t4222", {"port": 4222}),
        ("port\n  4222", {"port": 4222}),  # the value may start on the next line ...
        ("port: 1; debug: true", {"port": 1, "debug": True}),
        ("port: 1, debug: true", {"port": 1, "debug": True}),
        ("port: 1;\ndebug: true;", {"port": 1, "debug": True}),
        ('"port": 4222', {"port": 4222}),
        ("'port': 4222", {"port": 4222}),
        ('"my key" = 1', {"my key": 1}),
        ('{ "port": 4222, "debug": true }', {"port": 4222, "debug": True}),
        ("{\n port: 1\n}\n", {"port": 1}),
        ("{ a: 1 }\n{ b: 2 }", {"a": 1, "b": 2}),
        ("port: 1\nport: 2", {"port": 2}),  # the last one wins
        ("Port: 1\nport: 2", {"Port": 1, "port": 2}),  # the parser keeps the case
        ("", {}),
        ("# only a comment\n// and another\n", {}),
        ("port: 1\r\ndebug: true\r\n", {"port": 1, "debug": True}),
        ("\ufeffport: 1", {"port": 1}),
    ],
)
def test_key_value_forms(text: str, expected: dict[str, Any]) -> None:
    assert plain(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a { b: 1 }", {"a": {"b": 1}}),
        ("a: { b: 1 }", {"a": {"b": 1}}),
        ("a = { b = 1 }", {"a": {"b": 1}}),
        ("a {}", {"a": {}}),
        ("a {\n}", {"a": {}}),
        ("a { b: 1, c: 2 }", {"a": {"b": 1, "c": 2}}),
        ("a { b: 1; c: 2 }", {"a": {"b": 1, "c": 2}}),
        ("a {\n  b: 1\n  c: 2\n}", {"a": {"b": 1, "c": 2}}),
        ("a {\n  b\n  :\n  1\n}", {"a": {"b": 1}}),  # inside blocks, new lines are free
        ("a { b { c { d: true } } }", {"a": {"b": {"c": {"d": True}}}}),
        ("a { 'b c': 1, \"d\": 2 }", {"a": {"b c": 1, "d": 2}}),
        ("a: [1, 2, 3]", {"a": [1, 2, 3]}),
        ("a: [1]", {"a": [1]}),
        ("a: []", {"a": []}),
        ("a: [1, 2,]", {"a": [1, 2]}),
        ("a: [\n  1\n  2\n]", {"a": [1, 2]}),
        ("a: [\n  1,\n  2,\n]", {"a": [1, 2]}),
        ("a: [x, 'y', \"z\"]", {"a": ["x", "y", "z"]}),
        ("a: [[1, 2], [3]]", {"a": [[1, 2], [3]]}),
        ("a: [{u: 1}, {u: 2}]", {"a": [{"u": 1}, {"u": 2}]}),
        ("a: [\n {u: 1}\n {u: 2}\n]", {"a": [{"u": 1}, {"u": 2}]}),
    ],
)
def test_blocks_and_arrays(text: str, expected: dict[str, Any]) -> None:
    assert plain(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# c\nport: 1 # trailing\n", {"port": 1}),
        ("// c\nport: 1 // trailing\n", {"port": 1}),
        ("a {\n # c\n b: 1 # c\n // c\n}", {"a": {"b": 1}}),
        ("a: [\n # c\n 1 # c\n // c\n 2\n]", {"a": [1, 2]}),
        ("s: a#b", {"s": "a#b"}),  # no space before '#': part of the value
        ("s: a//b", {"s": "a//b"}),
        ('s: "a # b"', {"s": "a # b"}),
    ],
)
def test_comments(text: str, expected: dict[str, Any]) -> None:
    assert plain(text) == expected


UTC = dt.UTC


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("4222", 4222),
        ("-1", -1),
        ("0", 0),
        ("1.5", 1.5),
        ("-0.25", -0.25),
        ("64MB", 64 * 1024 * 1024),
        ("1K", 1000),
        ("1KiB", 1024),
        ("-1k", -1000),
        ("true", True),
        ("TRUE", True),
        ("yes", True),
        ("On", True),
        ("false", False),
        ("no", False),
        ("off", False),
        ('"true"', "true"),
        ("'yes'", "yes"),
        ("2020-01-02T03:04:05Z", dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1:4222", "127.0.0.1:4222"),
        ("localhost:4222", "localhost:4222"),
        ("nats://a:4222", "nats://a:4222"),
        ("10s", "10s"),
        ("1h30m", "1h30m"),
        ("4222abc", "4222abc"),
        ("0x10", "0x10"),
        ("/var/lib/nats", "/var/lib/nats"),
        ("a{b", "a{b"),
        ("hello", "hello"),
        ('"double quoted"', "double quoted"),
        ("'single quoted'", "single quoted"),
        ('"tab\\there"', "tab\there"),
        ('"nl\\ncr\\r"', "nl\ncr\r"),
        ('"quote\\"back\\\\"', 'quote"back\\'),
        ('"hex\\x41\\x42"', "hexAB"),
        ('"utf8 \\xc3\\xa9"', "utf8 é"),
        ("'raw \\q \\n'", "raw \\q \\n"),
        ("un\\x41quoted", "unAquoted"),
        ("esc\\ttrue", "esc\ttrue"),
        ('"multi\nline"', "multi\nline"),
        ("'multi\nline'", "multi\nline"),
        ("(\nline one\nline two\n)", "\nline one\nline two\n"),
        ("(\nhas ) inside\n)", "\nhas ) inside\n"),
        ("$2a$11$abcdefg", "$2a$11$abcdefg"),
        ("'$NOT_A_VAR'", "$NOT_A_VAR"),
        ('"$NOT_A_VAR"', "$NOT_A_VAR"),
        ("pre$NOT_A_VAR", "pre$NOT_A_VAR"),
        ("\u00e9t\u00e9", "\u00e9t\u00e9"),
    ],
)
def test_values(literal: str, value: Any) -> None:
    result = plain(f"v: {literal}\n")
    assert result == {"v": value}
    assert type(result["v"]) is type(value)


def test_positions_are_one_based_and_name_the_file() -> None:
    root = parse_text('# head\nport: 4222\nauth {\n  user: "a"\n}\n', "/etc/x.conf")
    assert root["port"].pos == Position("/etc/x.conf", 2, 7)
    assert root["port"].key_pos == Position("/etc/x.conf", 2, 1)
    assert root["auth"].value["user"].pos == Position("/etc/x.conf", 4, 9)
    assert root["auth"].value["user"].key_pos == Position("/etc/x.conf", 4, 3)
    assert str(root["auth"].pos) == "/etc/x.conf:3:6"


def test_to_plain_strips_positions() -> None:
    root = parse_text("a { b: [1, {c: x}] }")
    assert isinstance(root["a"], Node)
    assert to_plain(root) == {"a": {"b": [1, {"c": "x"}]}}


class TestVariables:
    def test_defined_earlier_at_top(self) -> None:
        assert plain("p = 4222\nport: $p") == {"p": 4222, "port": 4222}

    def test_keeps_the_type(self) -> None:
        assert plain("v = [a, b]\nw: $v\nx = {k: 1}\ny: $x") == {
            "v": ["a", "b"],
            "w": ["a", "b"],
            "x": {"k": 1},
            "y": {"k": 1},
        }

    def test_inner_block_sees_outer_and_own_keys(self) -> None:
        assert plain("o = 1\nb { i = 2, x: $o, y: $i }")["b"] == {"i": 2, "x": 1, "y": 2}

    def test_inner_definition_shadows_outer(self) -> None:
        assert plain("v = 1\nb { v = 2, x: $v }\ny: $v") == {"v": 1, "b": {"v": 2, "x": 2}, "y": 1}

    def test_outer_does_not_see_inner(self) -> None:
        with pytest.raises(ConfigError, match=r"t.conf:2:4: variable reference for 'i'"):
            plain("b { i = 2 }\nx: $i")

    def test_sibling_block_does_not_see_another(self) -> None:
        with pytest.raises(ConfigError, match="variable reference for 'i' can not be found"):
            plain("a { i = 2 }\nb { x: $i }")

    def test_must_be_defined_before_use(self) -> None:
        with pytest.raises(ConfigError, match=r"t.conf:1:4: variable reference for 'v'"):
            plain("x: $v\nv = 1")

    def test_in_arrays_and_blocks_in_arrays(self) -> None:
        assert plain("u = alice\nl: [$u, {n: $u}]")["l"] == ["alice", {"n": "alice"}]

    def test_reference_is_marked_used(self) -> None:
        root = parse_text("p = 1\nq = 2\nport: $p")
        assert root["p"].used_as_variable
        assert not root["q"].used_as_variable
        assert root["port"].pos == Position("<config>", 3, 7)  # where it is referred to

    def test_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("HW_PORT", "4333")
        monkeypatch.setenv("HW_FLAG", "true")
        monkeypatch.setenv("HW_NAME", "srv-1")
        monkeypatch.setenv("HW_LIST", "[a, b]")
        monkeypatch.setenv("HW_SIZE", "1KB")
        monkeypatch.setenv("HW_QUOTED", '"4333"')
        monkeypatch.setenv("HW_EMPTY", "")
        text = "\n".join(
            f"{k}: ${v}"
            for k, v in [
                ("p", "HW_PORT"),
                ("f", "HW_FLAG"),
                ("n", "HW_NAME"),
                ("l", "HW_LIST"),
                ("s", "HW_SIZE"),
                ("q", "HW_QUOTED"),
                ("e", "HW_EMPTY"),
            ]
        )
        assert plain(text) == {
            "p": 4333,
            "f": True,
            "n": "srv-1",
            "l": ["a", "b"],
            "s": 1024,
            "q": "4333",
            "e": "",
        }

    def test_file_definition_wins_over_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("HW_V", "from-env")
        assert plain("HW_V = from-file\nx: $HW_V")["x"] == "from-file"

    def test_environment_value_that_does_not_parse(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("HW_BAD", "two words")
        with pytest.raises(ConfigError, match=r"t.conf:1:4: variable reference for 'HW_BAD' could"):
            plain("x: $HW_BAD")

    def test_environment_value_referring_to_itself(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("HW_LOOP", "$HW_LOOP")
        with pytest.raises(ConfigError, match="'HW_LOOP' refers to itself"):
            plain("x: $HW_LOOP")

    def test_environment_chain(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("HW_A", "$HW_B")
        monkeypatch.setenv("HW_B", "42")
        assert plain("x: $HW_A") == {"x": 42}

    def test_missing_everywhere(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("HW_MISSING", raising=False)
        with pytest.raises(ConfigError, match="variable reference for 'HW_MISSING' can not be"):
            plain("x: $HW_MISSING")

    def test_braces_are_not_shell_syntax(self) -> None:
        with pytest.raises(ConfigError, match=r"variable reference for '\{X'"):
            plain("x: ${X}")


class TestIncludes:
    def write(self, path: Path, text: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    @pytest.mark.parametrize(
        "spelling",
        [
            "include a.conf",
            "include ./a.conf",
            'include "a.conf"',
            "include 'a.conf'",
            "INCLUDE a.conf",
            "include a.conf;",
            "include a.conf # comment",
        ],
    )
    def test_spellings(self, tmp_path: Path, spelling: str) -> None:
        self.write(tmp_path / "a.conf", "port: 4333\n")
        main = self.write(tmp_path / "main.conf", spelling + "\ndebug: true\n")
        assert to_plain(parse_file(str(main))) == {"port": 4333, "debug": True}

    def test_relative_to_the_including_file(self, tmp_path: Path) -> None:
        self.write(tmp_path / "conf" / "sub" / "users.conf", "include ../base.conf\nu: 1\n")
        self.write(tmp_path / "conf" / "base.conf", "b: 2\n")
        main = self.write(tmp_path / "conf" / "main.conf", "include sub/users.conf\n")
        assert to_plain(parse_file(str(main))) == {"b": 2, "u": 1}

    def test_absolute_path(self, tmp_path: Path) -> None:
        other = self.write(tmp_path / "elsewhere" / "x.conf", "x: 1\n")
        main = self.write(tmp_path / "main.conf", f"include {other}\n")
        assert to_plain(parse_file(str(main))) == {"x": 1}

    def test_inside_a_block(self, tmp_path: Path) -> None:
        self.write(tmp_path / "users.conf", "users: [{user: a, password: b}]\n")
        main = self.write(tmp_path / "m.conf", "authorization {\n  include users.conf\n}\n")
        assert to_plain(parse_file(str(main))) == {
            "authorization": {"users": [{"user": "a", "password": "b"}]}
        }

    def test_order_decides_overrides(self, tmp_path: Path) -> None:
        self.write(tmp_path / "a.conf", "port: 2\nname: inc\n")
        main = self.write(tmp_path / "m.conf", "port: 1\ninclude a.conf\nname: main\n")
        assert to_plain(parse_file(str(main))) == {"port": 2, "name": "main"}

    def test_included_keys_are_variables_afterwards(self, tmp_path: Path) -> None:
        self.write(tmp_path / "vars.conf", "PASS = s3cret\n")
        main = self.write(tmp_path / "m.conf", "include vars.conf\np: $PASS\n")
        assert to_plain(parse_file(str(main)))["p"] == "s3cret"

    def test_variables_do_not_cross_into_an_include(self, tmp_path: Path) -> None:
        self.write(tmp_path / "uses.conf", "x: $V\n")
        main = self.write(tmp_path / "m.conf", "V = 1\ninclude uses.conf\n")
        with pytest.raises(ConfigError, match=r"uses.conf:1:4: variable reference for 'V'"):
            parse_file(str(main))

    def test_positions_point_into_the_included_file(self, tmp_path: Path) -> None:
        inc = self.write(tmp_path / "a.conf", "\n\n  port: 1\n")
        main = self.write(tmp_path / "m.conf", "include a.conf\n")
        assert parse_file(str(main))["port"].pos == Position(str(inc), 3, 9)

    def test_missing_file(self, tmp_path: Path) -> None:
        main = self.write(tmp_path / "m.conf", "port: 1\ninclude nope.conf\n")
        with pytest.raises(ConfigError) as info:
            parse_file(str(main))
        assert str(info.value).startswith(f"{main}:2:1: cannot read include file '")
        assert "nope.conf': No such file or directory" in str(info.value)

    def test_self_include_is_a_cycle(self, tmp_path: Path) -> None:
        main = self.write(tmp_path / "m.conf", "include m.conf\n")
        with pytest.raises(ConfigError, match=r"m.conf:1:1: include cycle: .*m.conf -> .*m.conf"):
            parse_file(str(main))

    def test_two_file_cycle(self, tmp_path: Path) -> None:
        self.write(tmp_path / "a.conf", "x: 1\ninclude b.conf\n")
        self.write(tmp_path / "b.conf", "include a.conf\n")
        main = self.write(tmp_path / "m.conf", "include a.conf\n")
        with pytest.raises(ConfigError) as info:
            parse_file(str(main))
        message = str(info.value)
        assert message.startswith(f"{tmp_path / 'b.conf'}:1:1: include cycle: ")
        assert message.endswith(
            "a.conf -> " + str(tmp_path / "b.conf") + " -> " + str(tmp_path / "a.conf")
        )

    def test_same_file_twice_is_not_a_cycle(self, tmp_path: Path) -> None:
        self.write(tmp_path / "a.conf", "x: 1\n")
        main = self.write(tmp_path / "m.conf", "b { include a.conf }\nc { include a.conf }\n")
        assert to_plain(parse_file(str(main))) == {"b": {"x": 1}, "c": {"x": 1}}

    def test_include_as_a_key_is_just_a_key(self) -> None:
        assert plain("include: a.conf") == {"include": "a.conf"}

    def test_syntax_error_in_an_include_names_that_file(self, tmp_path: Path) -> None:
        inc = self.write(tmp_path / "bad.conf", "a {\n  b: 1\n")
        main = self.write(tmp_path / "m.conf", "include bad.conf\n")
        with pytest.raises(ConfigError, match=rf"^{inc}:1:3: '{{' is never closed$"):
            parse_file(str(main))


def test_unreadable_config_file(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"cannot read configuration file '.*nope\.conf': No such"
    ):
        parse_file(str(tmp_path / "nope.conf"))


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.conf"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        parse_file(str(path))


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("port: 1\n}", "2:1", "unexpected '}'"),
        ("a { b: 1 }}", "1:11", "unexpected '}'"),
        ("port: 1 }", "1:9", "unexpected '}'"),
        ("{ port: 1", "1:1", "'{' is never closed"),
        ("x: 1\na {\n  b: 1\n", "2:3", "'{' is never closed"),
        ("a: [1,\n2", "1:4", "'[' is never closed"),
        ("a: [,1]", "1:5", "unexpected ',' in array"),
        ("a: [1 2]", "1:7", "expected ',' or ']' after an array value, got '2'"),
        ("a { b: 1 c: 2 }", "1:10", "expected ',' or '}' after a value, got 'c'"),
        ("a { b: 1\n, }", "2:1", "unexpected ','"),
        ("a { b }", "1:5", "key 'b' has no value"),
        ("a { : 1 }", "1:5", "unexpected ':': a key must come first"),
        ("a { ] }", "1:5", "unexpected ']'"),
        ("port", "1:1", "key 'port' has no value"),
        ("x: 1\nport =\n4222", "2:7", "expected a value for 'port' but found a new line"),
        (": 1", "1:1", "unexpected ':': a key must come first"),
        ("= 1", "1:1", "unexpected '='"),
        ("port: 1 debug: true", "1:9", "after a value, got 'd'"),
        ("name: hello world", "1:13", "after a value, got 'w'"),
        ("v: 1.5s", "1:4", "malformed number '1.5s'"),
        ("v: 2020-01-01", "1:4", "malformed number '2020-01-01'"),
        ("v: 1-2", "1:4", "malformed number '1-2'"),
        ("v: -5s", "1:4", "malformed number '-5s'"),
        ("v: -", "1:4", "expected a digit after '-'"),
        ("v: .5", "1:4", "numbers must start with a digit"),
        ("v: 1kbi", "1:4", "invalid size suffix 'kbi'"),
        ("v: 99999999999999999999", "1:4", "out of the 64-bit range"),
        ('v: "abc', "1:4", "string is never closed"),
        ("v: 'abc", "1:4", "string is never closed"),
        ('v: "a\\qb"', "1:6", "invalid escape 'q'"),
        ('v: "a\\x4"', "1:6", "expected two hexadecimal digits after '\\x'"),
        ('v: "\\xff"', "1:4", "do not form UTF-8 text"),
        ("v: (\nabc)\n", "1:4", "'(' block is never closed"),
        ('"unterminated: 1', "1:1", "quoted key is never closed"),
        ("include", "1:1", "key 'include' has no value"),
        ("include\nx.conf", "1:8", "include needs a file name on the same line"),
        ("include [a]", "1:9", "expected a file name after include, got '['"),
        ("include 'a.conf", "1:9", "quoted include path is never closed"),
        pytest.param(
            "a: " + "[" * 201 + "]" * 201, "1:204", "nest deeper than 200 levels", id="too-deep"
        ),
    ],
)
def test_syntax_errors(text: str, where: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_text(text, "/cfg/x.conf")
    assert str(info.value).startswith(f"/cfg/x.conf:{where}: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)
