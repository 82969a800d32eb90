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
#: two devices, -ngl 16 at 32768 cells with the cache offloaded: the host layers' attention runs on the first GPU
#: over copies of their host-memory cache as with -nkvo (264.0 MiB recorded, 208.0 estimated: -9.5%); the rule is
#: applied with -nkvo only (`PlanBuilder._host_cache`: the planner's search assumes the first GPU's compute does not
#: grow as layers leave it)
KNOWN_UNDER = frozenset({"finer/llama-3.1-8b/2dev-ngl16-c32768"})


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
    assert len(cases) == 2 * 31
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
def test_nkvo_one_gpu_copies_against_the_logits(cases: list[Any], model: str) -> None:
    """-nkvo with flash attention on one GPU: the GPU runs the attention with the cache's K and V views and the mask
    copied in (`HostCacheAttention`). Up to 32768 cells that layer phase stays under the output phase's logits
    (282.5 MiB for llama-3.1-8b at 4096 and 32768 cells); at 65536 cells the copies exceed them (360.0 MiB: 128 MiB
    for each view, 64 MiB of mask above the 40 MiB of blocks; 680.0 MiB at 131072 cells; gemma-3-27b 634.0 and
    1210.0 MiB at its first full-attention layer). The estimate matches every one; before, the copies were not
    counted (282.5 and 554.1 MiB at 65536 and 131072 cells)."""
    ids = ("nkvo-c4096", "nkvo-c32768", "nkvo-c8192-ub2048", "nkvo-c8192-q8_0", "nkvo-c65536", "nkvo-c131072")
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
    assert len(two) == 2 * 10
    assert all(r.weights_exact_mib and r.context_exact for r in two), [r.key for r in two]
    assert all({d.name for d in r.devices} == {"CUDA0", "CUDA1", "Host"} for r in two)


#: the first GPU's compute buffer (MiB, recorded) where its first layer reads a cache in host memory (-nkvo, with
#: every layer on the GPUs or host layers whose multiplications it takes)
FIRST_GPU_HOST_CACHE = {
    "llama-3.1-8b/2dev-nkvo-c4096": 128.0,
    "llama-3.1-8b/2dev-nkvo-c8192": 148.0,
    "llama-3.1-8b/2dev-nkvo-c32768": 200.0,
    "llama-3.1-8b/2dev-nkvo-ngl16": 151.5,
    "llama-3.1-8b/2dev-nkvo-ngl16-c32768": 264.0,
    "llama-3.1-8b/2dev-nkvo-c8192-faoff": 600.0,
    "gemma-3-27b/2dev-nkvo-c32768": 346.0,
    "gemma-3-27b/2dev-nkvo-ngl31-c32768": 466.0,
    "gemma-3-27b/2dev-nkvo-c8192-faoff": 650.0,
}


def test_two_devices_first_gpu_host_cache_attention(cases: list[Any]) -> None:
    """Two devices, the first GPU's first layer over a cache in host memory: ggml-backend.cpp's scheduler skips
    FLASH_ATTN_EXT when it places ops by their weights, so the attention runs on the GPU that holds Q, with the K and
    V views and the mask copied in at the layer's split; where they land decides the peak (K in the two freed blocks
    at 8192 cells, V and the mask above Q and the FFN above the mask; at 32768 cells all three above Q and the FFN
    in the freed views' space; a later layer's V above the mask where its Q lands higher: after a host layer's weight
    copy, or above its product with a Q norm on a GPU layer after host ones, gemma-3-27b's layer 35). The replay
    (`HostCacheAttention`) gives the recorded buffer to the 0.1 MiB; before, 116.0 MiB at every -nkvo context (-32,
    -84 MiB) and 176.0 at -ngl 16, 32768 cells (264.0). The second device within 21.5 MiB (gemma-3-27b without flash
    attention: its later layers' scores over the copies), the host exact."""
    mib = 1 << 20
    got = {f"{r.model}/{r.case}": r for r in cases}
    for key, recorded in FIRST_GPU_HOST_CACHE.items():
        real, est = {d.name: d.compute for d in got[key].devices}["CUDA0"]
        assert round(real / mib, 1) == recorded, (key, real / mib)
        assert abs(real - est) < mib // 10, (key, real / mib, est / mib)
    for r in (r for r in cases if r.case.startswith("2dev-")):
        real, est = {d.name: d.compute for d in r.devices}["CUDA1"]
        assert abs(real - est) <= 21.5 * mib, (r.key, real / mib, est / mib)
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
