"""Which model spellings the loader reads over the network (the window reopens those at start)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fitplan.core.inputs.model_source import is_remote_source


@pytest.mark.parametrize(
    "source",
    [
        "hf.co/org/model-GGUF:Q4_K_M",
        "huggingface.co/org/model-GGUF",
        "org/model-GGUF:Q4_K_M",
        "https://example.org/m.gguf",
        " http://127.0.0.1:8080/m.gguf ",
    ],
)
def test_urls_and_hub_references_are_remote(source: str) -> None:
    assert is_remote_source(source)


@pytest.mark.parametrize("source", ["", "   ", "/no/such/model.gguf", "models/x.gguf", "model.gguf"])
def test_paths_are_not(source: str) -> None:
    assert not is_remote_source(source)


def test_an_existing_file_spelled_like_a_reference_is_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "model-GGUF:Q4_K_M").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert not is_remote_source("org/model-GGUF:Q4_K_M")
