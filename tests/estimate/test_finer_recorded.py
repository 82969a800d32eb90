"""The estimator against the placements finer than whole layers (tests/fixtures/llamacpp/finer, recorded by
`tools/groundtruth/record.py --grids finer` on the CUDA stand-in): the first offloaded layer of a dense model with
its FFN tensors in host memory (`-ot` as common/fit.cpp writes it for LAYER_FRACTION_ATTN / _UP / _GATE), and the
KV cache in host memory (`-nkvo`) with every layer, half of them, or a partial layer on the GPU."""

from __future__ import annotations

import json
from typing import Any

import pytest

from support.tools import load_tool

report = load_tool("tools/accuracy_report.py")

MODELS = ("llama-3.1-8b", "gemma-3-27b")
#: flash attention off with -nkvo: the GPU's buffer is 20 MiB (llama) and 42.5 MiB (gemma) over the estimate; the
#: scores' graph with the cache in host memory is not traced yet
KNOWN_UNDER = frozenset({"finer/gemma-3-27b/nkvo-c8192-faoff"})


def _cases() -> list[Any]:
    out = []
    for name in MODELS:
        doc = json.loads((report.FIXTURES / "finer" / f"{name}.json").read_text())
        header = report.FIXTURES / doc["model"]["header"]
        out += [report.run_case("finer", name, header, c) for c in doc["cases"]]
    return out


@pytest.fixture(scope="module")
def cases() -> list[Any]:
    return _cases()


def test_the_finer_recordings_are_there(cases: list[Any]) -> None:
    assert len(cases) == 2 * 19
    assert not [r.key for r in cases if r.error]


def test_weights_and_caches_exact(cases: list[Any]) -> None:
    """The partial layer's FFN tensors in the host's buffer, its attention and cache on the GPU: byte-exact."""
    assert all(r.weights_exact_mib for r in cases), [r.key for r in cases if not r.weights_exact_mib]
    assert all(r.context_exact for r in cases), [r.key for r in cases if not r.context_exact]


def test_the_partial_layer_moves_what_fit_cpp_names() -> None:
    """llama-3.1-8b with -ngl 17 and layer 16's ffn_down on the host (LAYER_FRACTION_GATE) against -ngl 16: the GPU
    holds layer 16's attention, gate and up (86.6 MiB more than -ngl 16) and its 32 MiB of cache (8192 cells)."""
    doc = json.loads((report.FIXTURES / "finer" / "llama-3.1-8b.json").read_text())
    by_id = {c["id"]: c for c in doc["cases"]}

    def gpu(cid: str, what: str) -> int:
        return sum(b[what] for b in by_id[cid]["results"]["buffers"] if b["buffer_type"] == "CUDA0")

    assert gpu("ngl17-part16-gate", "context") - gpu("ngl16-ub512", "context") == 32 << 20
    assert round((gpu("ngl17-part16-gate", "model") - gpu("ngl16-ub512", "model")) / (1 << 20), 1) == 86.6
    assert (
        gpu("ngl17-part16-attn", "model")
        < gpu("ngl17-part16-up", "model")
        < gpu("ngl17-part16-gate", "model")
    )
    assert gpu("ngl16-ub512", "model") < gpu("ngl17-part16-attn", "model")


def test_compute_within_tolerance(cases: list[Any]) -> None:
    off = [(r.key, round(r.compute_rel, 3)) for r in cases if abs(r.compute_rel) > report.COMPUTE_TOLERANCE]
    assert {k for k, _ in off} <= KNOWN_UNDER, off


@pytest.mark.parametrize("model", MODELS)
def test_nkvo_with_flash_attention_keeps_the_masks_on_the_host(cases: list[Any], model: str) -> None:
    """-nkvo with flash attention: the host runs the attention over its cache, so the GPU's compute buffer does not
    grow with the context (282.5 MiB for llama-3.1-8b at 4096 and 32768 cells) and holds neither the masks nor a
    quantized cache's f16 copies. Before: the masks counted on the GPU (+9.2% at 32768 cells)."""
    ids = ("nkvo-c4096", "nkvo-c32768", "nkvo-c8192-ub2048", "nkvo-c8192-q8_0")
    got = {r.case: r for r in cases if r.model == model and r.case in ids}
    assert len(got) == len(ids)
    for r in got.values():
        gpu = [d for d in r.devices if d.name == "CUDA0"]
        assert gpu and abs(gpu[0].compute[1] - gpu[0].compute[0]) < (1 << 20) // 4, (r.key, gpu[0].compute)


def test_dropping_the_draft_frees_its_buffers_only() -> None:
    """qwen3-30b-a3b on the CUDA stand-in with and without its qwen3-8b draft (llama-server, the standin_server
    grid): without the draft the target's three allocations are the same bytes and the draft's are gone (4.59 GiB of
    weights, 576 MiB of cache, 108 MiB of compute); the estimate without the draft matches it on every device."""
    doc = json.loads((report.FIXTURES / "standin_server" / "qwen3-30b-a3b.json").read_text())
    by_id = {c["id"]: c for c in doc["cases"]}
    with_draft = by_id["draft-np1-c4096"]["results"]["standin_alloc"]
    without = by_id["nodraft-np1-c4096"]["results"]["standin_alloc"]
    assert with_draft[: len(without)] == without and len(with_draft) == len(without) + 3
    header = report.FIXTURES / doc["model"]["header"]
    r = report.run_case("standin_server", "qwen3-30b-a3b", header, by_id["nodraft-np1-c4096"])
    assert not r.error and {d.name for d in r.devices} == {"CUDA0", "Host"}
    assert r.context_exact and r.weights_exact_mib
    assert all(abs(d.compute[0] - d.compute[1]) < (1 << 20) // 100 for d in r.devices)
