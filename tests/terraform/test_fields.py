"""Attribute conversions without a server: Terraform spellings, defaults as null, the mirror
layout. (Everything here is also exercised end to end by the other tests.)"""

from __future__ import annotations

from pathlib import Path

from headwater.control.models import Stream
from headwater_terraform.assets import StreamResource, StreamTemplateResource
from headwater_terraform.errors import SpecErrors
from headwater_terraform.fields import Field
from headwater_terraform.install import LAUNCHER, cli_config, install_provider, terraform_platform
from headwater_terraform.tables import PLACEMENT


def test_units_are_written_the_way_people_write_them() -> None:
    assert Field("max_age", "duration").to_terraform(365 * 24 * 3600 * 10**9) == "1y"
    assert Field("max_bytes", "size").to_terraform(10 * 1024**3) == "10GiB"
    assert Field("max_bytes", "size").to_terraform(-1) == "-1"
    assert Field("max_msgs", "count").to_terraform(1_000_000) == "1M"
    assert Field("backoff", "durations").to_terraform([10**9, 60 * 10**9]) == ["1s", "1m"]


def test_same_compares_what_the_server_stores() -> None:
    duration = Field("max_age", "duration")
    assert duration.same("365d", "1y")
    assert not duration.same("30d", "1y")
    assert Field("max_bytes", "size").same("1GiB", "1024MiB")
    assert Field("max_msgs", "count").same("1000", "1K")
    assert Field("subjects", "strings").same(None, [])


def test_empty_and_default_values_read_as_null() -> None:
    assert Field("description").to_terraform("") is None
    assert Field("metadata", "map").to_terraform({}) is None
    stream = Stream(name="S", placement={"cluster": "east"})
    assert PLACEMENT.to_terraform(stream.placement) == {
        "cluster": "east",
        "tags": None,
        "preferred": None,
    }
    values = StreamResource.values_of(Stream(name="S"))
    assert values["consumer_limits"] is None
    assert values["subjects"] is None  # the spec itself leaves them to the server
    assert values["max_age"] == "0s"


def test_invalid_values_name_their_attribute() -> None:
    try:
        StreamResource.build_spec({"name": "S", "max_age": "soon", "storage": "tape"})
    except SpecErrors as errors:
        paths = sorted(path[0] for path, _message in errors.problems)
        assert paths == ["max_age", "storage"]
    else:
        raise AssertionError("invalid values were accepted")
    try:
        StreamTemplateResource.build_spec({"name": "T", "max_streams": 1, "max_age": "x"})
    except SpecErrors as errors:
        assert [path for path, _message in errors.problems] == [["max_age"]]
    else:
        raise AssertionError("invalid values were accepted")


def test_upgrade_fills_and_drops_attributes() -> None:
    old = {"name": "S", "gone": 1}
    upgraded = StreamResource(provider=None).upgrade(None, 0, old)  # type: ignore[arg-type]
    assert upgraded["name"] == "S"
    assert "gone" not in upgraded
    assert set(upgraded) == set(StreamResource.attribute_names())


def test_mirror_layout(tmp_path: Path) -> None:
    executable = install_provider(tmp_path)
    expected = (
        tmp_path / "headwater.io/headwater/headwater/0.1.0" / terraform_platform()
    ) / "terraform-provider-headwater_v0.1.0"
    assert executable == expected
    assert executable.stat().st_mode & 0o111
    # No path in the launcher: the lock file's hash is the same on every machine.
    assert executable.read_text() == LAUNCHER and "/" not in LAUNCHER.split("exec", 1)[1]
    assert 'include = ["headwater.io/*/*"]' in cli_config(tmp_path)
