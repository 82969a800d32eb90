"""Suite-wide isolation: no test reads or writes the user's real cache or settings folders."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path_factory.mktemp("fitplan-user")
    monkeypatch.setenv("FITPLAN_CACHE_DIR", str(base / "cache"))
    monkeypatch.setenv("FITPLAN_CONFIG_DIR", str(base / "config"))
