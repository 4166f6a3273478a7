"""Fixtures for the configuration tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from headwater.server.config import LoadResult, load

Loader = Callable[..., LoadResult]


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Loader:
    """Load ``x.conf`` written in a temp cwd (next to cert.pem, key.pem, ca.pem) with flags."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cert.pem").write_text("cert")
    (tmp_path / "key.pem").write_text("key")
    (tmp_path / "ca.pem").write_text("ca")

    def loader(text: str, *flags: str) -> LoadResult:
        Path("x.conf").write_text(text)
        return load(["-c", "x.conf", *flags])

    return loader
