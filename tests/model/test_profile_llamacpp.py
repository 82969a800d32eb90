"""The profile of every recorded model against what llama.cpp 515e85511 reported when it loaded it.

Fixtures: tests/fixtures/llamacpp/{archs,sparse,placement}/*.json (tools/groundtruth/record.py). Each case's
`resolved` block holds llama.cpp's n_layer, n_ctx_train, n_vocab, n_expert, model size and parameter count, and
`swa_layers` the layers it marked sliding-window.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fitplan.core.gguf.reader import read_header
from fitplan.core.model.builder import build_profile
from support.models import TESTS

FIXTURES = TESTS / "fixtures" / "llamacpp"


def _files() -> list[Path]:
    return sorted(p for grid in ("archs", "sparse", "placement") for p in (FIXTURES / grid).glob("*.json"))


@pytest.mark.parametrize("path", _files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_profile_matches_llamacpp(path: Path) -> None:
    fixture = json.loads(path.read_text())
    profile = build_profile(read_header(FIXTURES / fixture["model"]["header"], allow_incomplete=True))
    case = next(c for c in fixture["cases"] if "results" in c)
    want = case["results"]["resolved"]
    assert profile.n_layer == want["n_layer"]
    assert profile.n_ctx_train == want["n_ctx_train"]
    assert profile.n_vocab == want["n_vocab"]
    assert (profile.moe.n_expert if profile.moe else 0) == want["n_expert"]
    assert profile.n_params == want["model_n_params"]
    assert profile.weight_bytes == want["model_size"]
    assert [ly.index for ly in profile.layers if ly.is_swa] == case["results"]["swa_layers"]
    assert profile.verified_architecture
