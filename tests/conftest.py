"""Suite-wide isolation (no test reads or writes the user's real cache or settings folders), and the loopback Hub
that the Hub, quants and window tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.hub import TEST_REPO, HubState, fake_hub, quant_repo


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path_factory.mktemp("fitplan-user")
    monkeypatch.setenv("FITPLAN_CACHE_DIR", str(base / "cache"))
    monkeypatch.setenv("FITPLAN_CONFIG_DIR", str(base / "config"))


@pytest.fixture(scope="module")
def repo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of quants of one model (`support.hub.quant_repo`), written once per test module."""
    return quant_repo(tmp_path_factory.mktemp("repo"))


@pytest.fixture
def hub(repo_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, HubState]]:
    """`repo_dir` served as `TEST_REPO` by a loopback Hub (HF_ENDPOINT points at it; no HF_TOKEN)."""
    st = HubState()
    st.add(TEST_REPO, repo_dir)
    with fake_hub(st) as (endpoint, state):
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield endpoint, state
