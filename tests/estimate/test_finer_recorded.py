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
KNOWN_UNDER = frozenset(
    {
        "finer/gemma-3-27b/nkvo-c8192-faoff",
        # two devices, the cache in host memory: the first device's compute buffer is under (see
        # test_two_devices_first_gpu_compute below), -7.2% and -5.3% of the total compute
        "finer/llama-3.1-8b/2dev-nkvo-c8192",
        "finer/llama-3.1-8b/2dev-nkvo-ngl16",
    }
)


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
    assert len(cases) == 2 * 23
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


def test_two_devices_weights_and_caches_exact(cases: list[Any]) -> None:
    """Two CUDA stand-ins with a layer split (-ts in layers, as a plan with a free split writes it): the partial
    layer's FFN tensors in the host's buffer and its attention and cache on the first device, and -nkvo's cache in
    host memory, byte-exact on every device."""
    two = [r for r in cases if r.case.startswith("2dev-")]
    assert len(two) == 2 * 4
    assert all(r.weights_exact_mib and r.context_exact for r in two), [r.key for r in two]
    assert all({d.name for d in r.devices} == {"CUDA0", "CUDA1", "Host"} for r in two)


def test_two_devices_first_gpu_compute(cases: list[Any]) -> None:
    """Two devices with layers on the CPU or the cache in host memory (no pipeline parallelism): the estimate of the
    first device's compute buffer is under by 1.5 to 40.5 MiB (llama-3.1-8b: 16 MiB at -ngl 17 with layer 16's FFN
    on the host, 32 MiB with -nkvo and every layer offloaded; gemma-3-27b up to 40.5 MiB), as with whole layers
    (standin/llama-3.1-8b/2dev-c8192-faon-ngl16: 135.5 estimated, 151.5 recorded); the second device within
    10.5 MiB, the host exact. Not traced yet; well inside the planner's default margin of 1 GiB per GPU. This pins
    the gap so that it cannot grow unseen."""
    mib = 1 << 20
    for r in (r for r in cases if r.case.startswith("2dev-")):
        real, est = {d.name: d.compute for d in r.devices}["CUDA0"]
        assert 0 <= real - est <= 41 * mib, (r.key, real / mib, est / mib)
        real, est = {d.name: d.compute for d in r.devices}["CUDA1"]
        assert 0 <= real - est <= 11 * mib, (r.key, real / mib, est / mib)
        real, est = {d.name: d.compute for d in r.devices}["Host"]
        assert abs(real - est) < mib // 10, (r.key, real / mib, est / mib)


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
