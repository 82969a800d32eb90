"""`--embedding` and `--reranking` against llama-server 515e85511 (tests/fixtures/llamacpp/embedding, recorded by
tools/groundtruth/record_embedding.py with the CPU build): the context llama-server derives and its output buffer.

`--reranking` is `--embedding` with rank pooling (common/arg.cpp): the server sets n_batch = n_ubatch and asks for
n_batch outputs for both; the output buffer holds the logits and the embeddings of n_seq_max outputs."""

from __future__ import annotations

import json

import pytest

from fitplan.core.gguf.reader import read_header
from fitplan.core.launch.flags import parse_flags
from fitplan.core.memory.context import output_buffer_bytes, resolve_context
from fitplan.core.model.builder import build_profile
from support.models import TESTS

FIXTURES = TESTS / "fixtures" / "llamacpp"
RECORDING = json.loads((FIXTURES / "embedding" / "qwen3-dense.json").read_text())
CASES = {c["id"]: c for c in RECORDING["cases"]}


def _settings(case: dict[str, object]):  # type: ignore[no-untyped-def]
    argv = list(case["command"])  # type: ignore[call-overload]
    return parse_flags(argv[argv.index("-c") :]).settings


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_context_and_output_buffer_match_the_server(case_id: str) -> None:
    case = CASES[case_id]
    profile = build_profile(read_header(FIXTURES / RECORDING["model"]["header"], allow_incomplete=True))
    s = _settings(case)
    ctx = resolve_context(profile, s)
    got = {"n_batch": ctx.n_batch, "n_ubatch": ctx.n_ubatch, "n_outputs_max": ctx.n_outputs_max}
    recorded = case["results"]["resolved"]
    assert got == {k: recorded[k] for k in got}
    # the log prints MiB with two decimals
    assert abs(output_buffer_bytes(profile, ctx) / (1 << 20) - case["results"]["output_mib"]) <= 0.005


def test_reranking_is_recorded_like_embedding() -> None:
    emb, rer = CASES["embedding-c1024-np4"]["results"], CASES["reranking-c1024-np4"]["results"]
    assert emb["resolved"] == rer["resolved"] and emb["buffers_mib"] == rer["buffers_mib"]
    assert "--reranking" in CASES["reranking-c1024-np4"]["command"]
