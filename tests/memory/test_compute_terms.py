"""The compute terms as objects (fitplan.core.memory.compute.terms) and the one evaluator that reads a device's plan
(`device_plan.device_parts`): every term's bytes over arrays of contexts equal its bytes at each context, on every
architecture, and the plan combines its groups by the rules `DevicePlan` states."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from fitplan.core.base.devices import GIB, Device, Machine, Vendor, assumed_gpu, host_device
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.memory.compute import ComputePlan
from fitplan.core.memory.compute.allocator import Affine, ChunkedFit
from fitplan.core.memory.compute.builder import tensor_limit
from fitplan.core.memory.compute.device_plan import DevicePlan, evaluate_plan, total_array
from fitplan.core.memory.compute.layer_replay import (
    LAYER_IN,
    ONE_BUFFER,
    LayerRun,
    deepseek2_runs,
    replay_layers,
)
from fitplan.core.memory.compute.terms import (
    FA_COPIES,
    FFN,
    LOGITS,
    SCAN,
    SCORES,
    AttentionScores,
    Chunks,
    ChunkSpill,
    Fixed,
    HostScores,
    LogitsOnTop,
    ReplayedBuffer,
)
from fitplan.core.memory.weights import place_weights
from support.compute import compute_inputs
from support.models import ARCHS, SPARSE, profile_at

HOST = host_device(512 * GIB)
NB = np.array([256, 768, 4096, 33024, 131072], dtype=np.int64)
NS = np.array([256, 512, 1024, 1536, 4608], dtype=np.int64)
MODELS = [
    *sorted(ARCHS.glob("*.gguf")),
    SPARSE / "qwen3-next-80b-a3b.header.gguf",
    SPARSE / "gpt-oss-20b.header.gguf",
]
#: (GPUs, -ngl, flash attention, K/V cache type, sequences, pipeline parallelism)
SETUPS = (
    (0, 0, True, "f16", 1, False),
    (0, 0, False, "q8_0", 2, False),
    (2, 2, True, "q4_0", 1, False),
    (2, 99, False, "f16", 1, False),
    (2, 99, True, "f16", 1, True),
)


def _gpus(n: int) -> tuple[Device, ...]:
    return tuple(dataclasses.replace(assumed_gpu(f"G{i}", 48), backend_name=f"CUDA{i}") for i in range(n))


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name.split(".")[0])
def test_every_term_over_a_curve_equals_it_at_each_context(path: Path) -> None:
    profile = profile_at(path)
    for n_gpu, ngl, fa, ctype, seqs, pp in SETUPS:
        machine = Machine(_gpus(n_gpu), HOST)
        placement = place_weights(profile, LaunchSettings(n_gpu_layers=ngl), machine)
        inputs = compute_inputs(
            n_kv_base=0,
            flash_attn=fa,
            cache_type_k=ctype,
            cache_type_v=ctype if fa else "f16",
            n_seqs=seqs,
            pipeline_parallel=pp,
        )
        plan = ComputePlan(profile, inputs, placement, (Vendor.NVIDIA,) * n_gpu)
        for p in plan.plans:
            for t in p.terms():
                over = t.over(NB, NS)
                assert over.dtype == np.int64
                assert over.tolist() == [t.at(b, w) for b, w in zip(NB.tolist(), NS.tolist(), strict=True)], t
        rows = plan.totals_array(NB, NS)
        for i, (b, w) in enumerate(zip(NB.tolist(), NS.tolist(), strict=True)):
            assert [x.bytes for x in plan.evaluate(b, w)] == rows[:, i].tolist()


def _buffer(p: DevicePlan) -> dict[str, int]:
    """The plan's parts at one context, checked against the curve's total there."""
    buf = evaluate_plan(p, 1000, 0)
    assert total_array(p, np.array([1000]), np.array([0])).tolist() == [buf.bytes]
    return {x.label: x.bytes for x in buf.parts}


def test_the_transient_is_the_larger_of_attention_and_ffn() -> None:
    base = DevicePlan(device=0, layer_phase=True, inputs=(Fixed("blocks", 7),))
    att = dataclasses.replace(base, attention=(Fixed(SCAN, 30), Fixed(SCAN, 20)), ffn=(Fixed(FFN, 25),))
    assert _buffer(att) == {"blocks": 7, SCAN: 30}
    # the FFN on a tie
    tie = dataclasses.replace(att, ffn=(Fixed(FFN, 30),))
    assert _buffer(tie) == {"blocks": 7, FFN: 30}
    # named after the scores when a term that has them is nonzero; CUDA's copies are a part of their own
    scores = dataclasses.replace(
        att, attention=(Fixed(SCAN, 30), Fixed(SCORES, 0)), fa_copies=Fixed(FA_COPIES, 4)
    )
    assert _buffer(scores) == {"blocks": 7, SCAN: 26, FA_COPIES: 4}
    scores = dataclasses.replace(scores, attention=(Fixed(SCAN, 30), Fixed(SCORES, 1)))
    assert _buffer(scores) == {"blocks": 7, SCORES: 26, FA_COPIES: 4}
    # no layers here: no transient
    assert _buffer(dataclasses.replace(att, layer_phase=False)) == {"blocks": 7}


def test_a_replayed_buffer_counts_what_it_holds_beyond_the_other_terms() -> None:
    """`DevicePlan.replayed`: the device's whole buffer replayed; where it is larger than the other terms' sum the
    difference is a part of its own (the free blocks the layers leave), where smaller nothing changes."""
    plan = DevicePlan(
        device=0,
        layer_phase=True,
        inputs=(Fixed("blocks", 7),),
        ffn=(Fixed(FFN, 25),),
        output=(Fixed(LOGITS, 20),),
        under=(Fixed("copies", 10),),
        replayed=Fixed("free blocks", 50),
    )
    assert _buffer(plan) == {"blocks": 7, FFN: 25, "copies": 10, "free blocks": 8}
    assert _buffer(dataclasses.replace(plan, replayed=Fixed("free blocks", 30))) == {
        "blocks": 7,
        FFN: 25,
        "copies": 10,
    }


def test_the_buffer_is_the_larger_phase_with_what_is_under_both() -> None:
    layer = DevicePlan(
        device=0,
        layer_phase=True,
        inputs=(Fixed("blocks", 10),),
        ffn=(Fixed(FFN, 20),),
        after=(Fixed("MLA V copy", 3),),
        output=(Fixed("logits", 33),),
        under=(Fixed("op-offload weight copy", 5),),
    )
    assert _buffer(layer) == {"blocks": 10, FFN: 20, "MLA V copy": 3, "op-offload weight copy": 5}
    out = dataclasses.replace(layer, output=(Fixed("logits", 34),))
    assert _buffer(out) == {"logits": 34, "op-offload weight copy": 5}


def test_logits_above_an_unmerged_free_end_go_on_the_layer_phase_without_its_scores() -> None:
    """An out-of-order free list keeps the layer phase's freed space from merging back into the free end
    (`DevicePlan.output_above_layer`): the logits go on top of the layer phase without the attention's scores
    (these are taken from the free end and merge back into it), the larger of that and the layer phase live."""
    plan = DevicePlan(
        device=0,
        layer_phase=True,
        inputs=(Fixed("blocks", 10),),
        attention=(Fixed(SCAN, 15), Fixed(SCORES, 0)),
        ffn=(Fixed(FFN, 20),),
        output=(Fixed(LOGITS, 50),),
    )
    # before: the larger phase, the logits alone (50)
    assert _buffer(plan) == {LOGITS: 50}
    above = dataclasses.replace(plan, output_above_layer=True)
    assert _buffer(above) == {"layer phase under the logits": 30, LOGITS: 50}
    # scores larger than that: the layer phase with them is the peak, the logits not above them
    scores = dataclasses.replace(above, attention=(Fixed(SCAN, 15), Fixed(SCORES, 90)))
    assert _buffer(scores) == {"blocks": 10, SCORES: 90}
    smaller = dataclasses.replace(above, attention=(Fixed(SCAN, 15), Fixed(SCORES, 60)))
    assert _buffer(smaller) == {"layer phase under the logits": 30, LOGITS: 50}


def test_the_hosts_logits_take_the_transients_place_where_at_least_as_large() -> None:
    host = DevicePlan(device=None, layer_phase=True, inputs=(Fixed("masks", 9),), ffn=(Fixed(FFN, 20),))
    assert _buffer(dataclasses.replace(host, logits=LogitsOnTop(20))) == {"masks": 9, "logits": 20}
    assert _buffer(dataclasses.replace(host, logits=LogitsOnTop(19))) == {"masks": 9, FFN: 20}
    # a host without layers: the logits on the graph inputs
    idle = dataclasses.replace(host, layer_phase=False, logits=LogitsOnTop(5))
    assert _buffer(idle) == {"masks": 9, "logits": 5}


# ---- Vulkan: a buffer made of chunks (ggml-alloc's `max_size` per chunk) and tensors above the storage range

MIB = 1 << 20


def test_logits_that_do_not_fit_above_what_is_under_them_take_a_chunk_of_their_own() -> None:
    """ggml-alloc opens a chunk for a tensor that fits in no chunk's free space (ggml-alloc.c
    `ggml_dyn_tallocr_alloc`): with 100-byte chunks, logits of 80 over 30 bytes under them take their own, next to
    the 60-byte layer phase (140 in all; without chunks the larger phase, 110)."""
    plan = DevicePlan(
        device=0,
        layer_phase=True,
        inputs=(Fixed("blocks", 10),),
        ffn=(Fixed(FFN, 50),),
        output=(Fixed(LOGITS, 80), Fixed("output norm", 30)),
    )
    assert sum(_buffer(plan).values()) == 110
    chunked = dataclasses.replace(plan, max_chunk=100)
    assert _buffer(chunked) == {"blocks": 10, FFN: 50, LOGITS: 80}
    # what is under the logits larger than the layer phase: it, and the logits
    under = dataclasses.replace(chunked, output=(Fixed(LOGITS, 80), Fixed("output norm", 70)))
    assert _buffer(under) == {LOGITS: 80, "output norm": 70}
    # everything fits in one chunk: as without chunks
    small = dataclasses.replace(chunked, output=(Fixed(LOGITS, 60), Fixed("output norm", 30)))
    assert _buffer(small) == {LOGITS: 60, "output norm": 30}


def _chunks(ffn_first: int, many: bool = True) -> Chunks:
    return Chunks(size=1024 * MIB, tensor_limit=4096 * MIB, block=32 * MIB, ffn_first=ffn_first, many=many)


def test_scores_that_open_a_chunk_count_twice_when_the_ffn_follows_them_there() -> None:
    """llama-3.1-8b on the Vulkan stand-in at 4096 cells, `-ub 2048`, no flash attention (the allocator's trace):
    the 1 GiB `kq-0` opens chunk 1, the 112 MiB gate finds no space in chunk 0 and goes into the freed chunk 1,
    the layer's output stays there and `kq-1` opens chunk 2. Scores of 262144 bytes per cell above a 48 MiB Q."""
    kq = (Affine(a_base=262144, c=48 * MIB),)
    twice = AttentionScores(kq, chunks=_chunks(ffn_first=112 * MIB))
    assert twice.at(4096, 0) == 48 * MIB + 2 * 1024 * MIB
    # the FFN fits in the space the first chunk has free (a smaller layer shape's live set): once, in a chunk
    # next to the first one, whose highest end is that larger live set (the chunks' highest ends add up)
    fits = AttentionScores((*kq, Affine(a_swa=65536, c=8 * MIB)), chunks=_chunks(ffn_first=112 * MIB))
    assert fits.at(4096, 2048) == (8 + 128) * MIB + 1024 * MIB
    # one attention layer, or scores that fit in a chunk: once
    assert AttentionScores(kq, chunks=_chunks(112 * MIB, many=False)).at(4096, 0) == 1072 * MIB
    assert twice.at(2048, 0) == 48 * MIB + 512 * MIB
    assert twice.freed_chunk(4096, 0) == 1024 * MIB and twice.freed_chunk(2048, 0) == 0
    # at or above the storage range the scores leave the device (`HostScores` counts them on the host)
    assert twice.at(16384, 0) == 48 * MIB
    host = HostScores(((kq[0], Affine(a_base=4096), 4096 * MIB),))
    assert host.at(16384, 0) == 4096 * MIB + 64 * MIB and host.at(8192, 0) == 0


def test_vulkan_tensor_limit_with_and_without_64bit_shader_indexing() -> None:
    """ggml-vulkan `supports_op` refuses a tensor above the buffer size (4 GiB) and, without
    VK_EXT_shader_64bit_indexing, above maxStorageBufferRange (4 GiB - 1, the stand-in's `maxrange=4294967295`):
    DeepSeek-V2-Lite's exactly 4 GiB scores (16 heads x 32768 cells x 2048 tokens, f32) stay on a device with the
    extension only (the stand-in's `idx64=1` recording: `kq-0` in chunk 1 of Vulkan0)."""
    assert tensor_limit(False) == 4 << 30 and tensor_limit(True) == (4 << 30) + 1
    kq = (Affine(a_base=16 * 2048 * 4, c=144 * MIB),)
    views = Affine(a_base=576 * 2)
    for idx64, on_device in ((False, False), (True, True)):
        chunks = dataclasses.replace(_chunks(ffn_first=0), tensor_limit=tensor_limit(idx64))
        assert chunks.on_device(4 << 30) is on_device
        assert chunks.on_device((4 << 30) - 1)
        host = HostScores(((kq[0], views, tensor_limit(idx64)),))
        assert host.at(32768, 0) == (0 if on_device else (4 << 30) + 36 * MIB)
        assert AttentionScores(kq, chunks=chunks).at(32768, 0) == 144 * MIB + (4096 * MIB if on_device else 0)


def test_the_ffn_takes_the_space_of_vs_mla_copy_before_the_scores_chunk() -> None:
    """DeepSeek-V2-Lite on the Vulkan stand-in at 32768 cells, no flash attention (the allocator's traces): gate and
    up (85.5 MiB each at `-ub 2048`) exceed the 144 MiB Qcur's replay leaves free in chunk 0, `ffn_up-0` goes into
    the freed chunk of the 4 GiB `kq-0` and the scores count twice; at `-ub 512` V's 32 MiB MLA copy `v_cont-0` lies
    above Qcur (it does not fit in Qcur's 18 MiB) and its freed space holds gate and up (21.4 MiB each) next to
    Qcur's 36: the 1 GiB scores count once."""
    kq = (Affine(a_base=16 * 512 * 4, c=36 * MIB),)
    v_copy = Affine(a_base=512 * 2, room=18 * MIB)
    gate_up = 2 * 10944 * 512 * 4
    chunks = dataclasses.replace(_chunks(ffn_first=gate_up), block=4 * MIB, v_copy=v_copy)
    assert AttentionScores(kq, chunks=chunks).at(32768, 0) == (36 + 1024) * MIB
    # V's copy inside Qcur's freed space (a larger Qcur): it adds no room, gate and up go to the scores' chunk
    inside = dataclasses.replace(chunks, v_copy=dataclasses.replace(v_copy, room=40 * MIB))
    assert AttentionScores(kq, chunks=inside).at(32768, 0) == (36 + 2 * 1024) * MIB
    assert (
        AttentionScores(kq, chunks=dataclasses.replace(chunks, v_copy=Affine())).at(32768, 0)
        == (36 + 2 * 1024) * MIB
    )


def test_scores_of_two_caches_take_the_chunks_they_fit_in_graph_order() -> None:
    """gpt-oss-20b on the Vulkan stand-in at `-ub 2048` without flash attention (the allocator's peaks): at 4096
    cells `kq-0` (sliding window, 1152 MiB) opens chunk 1 and the FFN follows it there, `kq-1` (full, 2048 MiB)
    opens chunk 2, where every later layer's scores fit: 3420 MiB with chunk 0's 220. At 32768 cells the full
    layers' 16 GiB scores run on the host, their FFN stays in chunk 0, and every sliding-window layer's scores go
    back into chunk 1 (then the 1571 MiB logits take a chunk of their own: 2911 MiB)."""
    swa, full = Affine(a_swa=524288, c=10 * MIB), Affine(a_base=524288, c=10 * MIB)
    order = (True, False) * 12
    chunks = dataclasses.replace(_chunks(ffn_first=90 * MIB), order=order)
    att = AttentionScores((swa, full), chunks=chunks)
    assert att.at(4096, 2304) == 10 * MIB + 1152 * MIB + 2048 * MIB
    assert att.at(32768, 2304) == 10 * MIB + 1152 * MIB  # the full layers' scores are on the host
    # the full layers first: their chunk, held at its start by the FFN's output, still takes the sliding-window
    # scores, and the next full scores open a second chunk
    first_full = AttentionScores((swa, full), chunks=dataclasses.replace(chunks, order=(False, True) * 12))
    assert first_full.at(4096, 2304) == 10 * MIB + 2048 * MIB + 2048 * MIB
    # full layers only: the FFN's output holds the first chunk and the next scores open another; where the FFN
    # fits in chunk 0, one chunk
    only_full = dataclasses.replace(chunks, order=(False,) * 12)
    assert AttentionScores((full,), chunks=only_full).at(4096, 0) == 10 * MIB + 2 * 2048 * MIB
    roomy = AttentionScores((full,), chunks=dataclasses.replace(only_full, ffn_first=8 * MIB))
    assert roomy.at(4096, 0) == 10 * MIB + 2048 * MIB


def test_chunked_fit_opens_a_chunk_for_what_fits_in_none() -> None:
    """The allocator's list on the Vulkan stand-in, DeepSeek-V3 at 4096 cells, `-ub 2048`, flash attention: 240 MiB
    of blocks and inputs, q (192 MiB), q_nope_absorbed (512) and q_pe (64) fill chunk 0 to 1008 MiB; Qcur (576) fits
    in no chunk's free space and opens chunk 1; once the attention is freed the 1010 MiB logits do not fit above
    the blocks in chunk 0 and grow chunk 1: 2018 MiB."""
    sim = ChunkedFit(1024 * MIB, 240 * MIB)
    sim.run([("q", 192 * MIB), ("q_nope", 512 * MIB), ("q_pe", 64 * MIB), ("q", 0), ("Qcur", 576 * MIB)])
    assert [c[2] for c in sim.chunks] == [1008 * MIB, 576 * MIB]
    # the next tensor takes q's freed block below chunk 0's end (a fit below an end comes first)
    sim.alloc("k", 100 * MIB)
    assert sim.live["k"] == (0, 240 * MIB, 100 * MIB)
    sim.release(*list(sim.live))
    sim.alloc("logits", 1010 * MIB)
    assert sim.live["logits"][0] == 1 and sim.total == 2018 * MIB
    # one chunk: as one buffer
    one = ChunkedFit(1024 * MIB, 100 * MIB)
    assert one.run([("a", 300 * MIB), ("b", 200 * MIB), ("a", 0), ("c", 250 * MIB)]) == 600 * MIB


def test_chunk_spill_adds_what_the_chunks_hold_beyond_one_buffer() -> None:
    """`ChunkSpill` over the same sequence: the layer phase in two chunks and the logits in the second, less the
    single-buffer figure (the base and the replay's peak); nothing where the sequence fits in one chunk."""
    ops = (("q", 192 * MIB), ("q_nope", 512 * MIB), ("q_pe", 64 * MIB), ("q", 0), ("Qcur", 576 * MIB))
    spill = ChunkSpill(Affine(c=240 * MIB), ops, 0, 1024 * MIB, 1010 * MIB, 56 * MIB)
    assert spill.at(0, 0) == 2018 * MIB - (240 + 192 + 512 + 64 + 576) * MIB
    small = ChunkSpill(Affine(c=40 * MIB), ops[:3], 0, 1024 * MIB, 1010 * MIB, 56 * MIB)
    assert small.at(0, 0) == 0
    # chunks already there (expert copies) take the spill without growing: nothing added
    copies = dataclasses.replace(spill, others=(2016 * MIB, 2940 * MIB))
    assert copies.at(0, 0) == 0


def _mla_runs(model: str, first: int, last: int, n_tok: int = 2048) -> tuple[LayerRun, ...]:
    profile = profile_at(SPARSE / f"{model}.header.gguf")
    assert profile.mla is not None
    return deepseek2_runs(profile, list(range(first, last + 1)), profile.mla, n_tok, n_tok)


#: DeepSeek-V3's 2048-token f32 row block (n_embd 7168) and logits (vocabulary 129280).
_BLOCK = 4 * 2048 * 7168
_LOGITS = 4 * 2048 * 129280
#: DeepSeek-V2-Lite's (n_embd 2048, vocabulary 102400) at 2048 and 4096 tokens.
_LITE = 4 * 2048 * 2048
_LITE_LOGITS = 4 * 2048 * 102400


def _one_device(block: int, n_tok: int, mask: int) -> tuple[tuple[str, int], ...]:
    """One device's first chunk when its first layer starts: the first layer's norm in the mixed batch's freed
    rows, the rest of them and the slots free, the embeddings' copy, positions, K indices, the mask and the output
    ids, the assembled embeddings."""
    return (
        ("attn_norm", block),
        ("", block + 8 * n_tok),
        (LAYER_IN, block),
        ("in", 16 * n_tok + mask),
        ("keep", block),
    )


def _copies(blocks: int, block: int, n_tok: int, mask: int, out_ids: bool) -> int:
    """Four pipeline-parallel copies of each split input: `blocks` row blocks (and the slots on the first
    device), positions, K indices, the mask, the output ids where the output is."""
    first = 8 * n_tok if blocks == 3 else 0
    return 4 * (blocks * block + first + 4 * n_tok + 8 * n_tok + mask + (4 * n_tok if out_ids else 0))


@pytest.mark.parametrize(
    ("model", "n_tok", "prelude", "layers", "tail", "chunked", "one_buffer"),
    [
        # DeepSeek-V3, one device at 4096 and 32768 cells
        (
            "deepseek-v3",
            2048,
            _one_device(_BLOCK, 2048, 2048 * 4096 * 2),
            (0, 60),
            _LOGITS,
            2116075520,
            1660993536,
        ),
        (
            "deepseek-v3",
            2048,
            _one_device(_BLOCK, 2048, 2048 * 32768 * 2),
            (0, 60),
            _LOGITS,
            2300624896,
            1778434048,
        ),
        # two devices, -ts 3,1: layers 0-46, then 47-60 with the output
        (
            "deepseek-v3",
            2048,
            (("copies", _copies(3, _BLOCK, 2048, 2048 * 8192 * 2, False)), ("embeddings", _BLOCK)),
            (0, 46),
            0,
            3028451328,
            2550300672,
        ),
        (
            "deepseek-v3",
            2048,
            (("copies", _copies(2, _BLOCK, 2048, 2048 * 8192 * 2, True)),),
            (47, 60),
            _LOGITS,
            3143761920,
            2189557760,
        ),
        # DeepSeek-V2-Lite (no router groups, no selection bias): -ts 3,1 (layers 0-20, then 21-26), and one
        # device at -ub 4096 with its 1600 MiB logits in a chunk of their own
        (
            "deepseek-v2-lite",
            2048,
            (("copies", _copies(3, _LITE, 2048, 2048 * 8192 * 2, False)), ("embeddings", _LITE)),
            (0, 20),
            0,
            709001216,
            709001216,
        ),
        (
            "deepseek-v2-lite",
            2048,
            (("copies", _copies(2, _LITE, 2048, 2048 * 8192 * 2, True)),),
            (21, 26),
            _LITE_LOGITS,
            1480720384,
            1140981760,
        ),
        (
            "deepseek-v2-lite",
            4096,
            _one_device(2 * _LITE, 4096, 4096 * 4096 * 2),
            (0, 26),
            2 * _LITE_LOGITS,
            2383511552,
            1845592064,
        ),
    ],
    ids=[
        "v3-c4096",
        "v3-c32768",
        "v3-ts3,1-Vulkan0",
        "v3-ts3,1-Vulkan1",
        "lite-Vulkan0",
        "lite-Vulkan1",
        "lite-ub4096",
    ],
)
def test_layer_replay_places_every_layer_where_the_allocator_does(
    model: str,
    n_tok: int,
    prelude: tuple[tuple[str, int], ...],
    layers: tuple[int, int],
    tail: int,
    chunked: int,
    one_buffer: int,
) -> None:
    """DeepSeek-V3 and DeepSeek-V2-Lite with flash attention on the Vulkan-shaped stand-in: the whole layer phase
    over 1 GiB chunks, then the logits (or, on a device before the output's, the next layer's first norm), gives
    the recorded compute buffers (tests/fixtures/llamacpp/standin_vulkan/), and in one buffer what the same runs
    give with the chunk limit lifted (`GGML_VK_SUBALLOCATION_BLOCK_SIZE=17179869184`, `--standin
    vulkan:16GiB:maxalloc=16GiB`). With -ts 3,1 the later layers' query parts spread over four chunks on
    DeepSeek-V3's Vulkan0 (976, 704, 632, 576 MiB); the first layer's attention replayed alone above a fixed base
    gave 2368 and 2522 MiB there. The last layer gathers its output rows (`inp_out_ids`)."""
    block = 4 * n_tok * profile_at(SPARSE / f"{model}.header.gguf").n_embd
    ops = (("logits", tail),) if tail else (("next norm", block),)
    runs = _mla_runs(model, *layers, n_tok=n_tok)
    assert replay_layers(1 << 30, prelude, runs, ops)[1] == chunked
    assert replay_layers(ONE_BUFFER, prelude, runs, ops)[1] == one_buffer
    # a run stops once a layer repeats an earlier one's state: the same as replaying each layer
    each = tuple((seq, 1) for seq, n in runs for _ in range(n))
    assert replay_layers(1 << 30, prelude, each, ops)[1] == chunked


@pytest.mark.parametrize(
    ("model", "layers", "prelude", "tail"),
    [
        (
            "deepseek-v3",
            (0, 60),
            (
                ("attn_norm", Affine(c=_BLOCK)),
                ("", Affine(c=_BLOCK + 8 * 2048)),
                (LAYER_IN, Affine(c=_BLOCK)),
                ("in", Affine(a_base=2048 * 2, c=32768)),
                ("keep", Affine(c=_BLOCK)),
            ),
            (("logits", _LOGITS),),
        ),
        (
            "deepseek-v3",
            (0, 46),
            (
                ("copies", Affine(a_base=4 * 2048 * 2, c=4 * (3 * _BLOCK + 40960))),
                ("embeddings", Affine(c=_BLOCK)),
            ),
            (("next norm", _BLOCK),),
        ),
        (
            "deepseek-v2-lite",
            (21, 26),
            (("copies", Affine(a_base=4 * 2048 * 2, c=4 * (2 * _LITE + 32768))),),
            (("logits", _LITE_LOGITS),),
        ),
    ],
    ids=["v3-one-device", "v3-pipeline-first", "lite-pipeline-output"],
)
def test_replayed_terms_over_a_curve_equal_them_at_each_context(
    model: str,
    layers: tuple[int, int],
    prelude: tuple[tuple[str, Affine], ...],
    tail: tuple[tuple[str, int], ...],
) -> None:
    """`ChunkSpill` and `ReplayedBuffer` over a context curve (`replay_curve`: few replays, the totals between two
    alike ones taken from the size of the copied mask) equal them replayed at each context."""
    runs = _mla_runs(model, *layers)
    spill = ChunkSpill(Affine(), (), 0, 1 << 30, 0, 0, prelude=prelude, runs=runs, tail=tail)
    whole = ReplayedBuffer(prelude, runs, tail, 1 << 30)
    nb = np.arange(256, 131072 + 1, 256, dtype=np.int64)
    ns = np.zeros_like(nb)
    for term in (spill, whole):
        curve = term.over(nb, ns)
        assert curve.tolist() == [term.at(int(b), 0) for b in nb]
    assert len(set(spill.over(nb, ns).tolist())) > 1  # the layout changes along the curve


def test_chunk_spill_with_runs_adds_the_chunks_over_one_buffer() -> None:
    """`ChunkSpill` with the device's layer runs: the replay over chunks less the same replay in one buffer, the
    prelude read at the cells (the copied mask follows them)."""
    runs = _mla_runs("deepseek-v3", 0, 60)
    prelude = (
        ("attn_norm", Affine(c=_BLOCK)),
        ("", Affine(c=_BLOCK + 8 * 2048)),
        (LAYER_IN, Affine(c=_BLOCK)),
        ("in", Affine(a_base=2048 * 2, c=32768)),
        ("keep", Affine(c=_BLOCK)),
    )
    spill = ChunkSpill(
        Affine(), (), 0, 1 << 30, 0, 0, prelude=prelude, runs=runs, tail=(("logits", _LOGITS),)
    )
    assert spill.at(4096, 0) == 2116075520 - 1660993536
    assert spill.at(32768, 0) == 2300624896 - 1778434048
    assert list(spill.over(np.array([4096, 32768]), np.array([0, 0]))) == [455081984, 522190848]


@pytest.mark.parametrize(
    "path",
    [SPARSE / "gpt-oss-20b.header.gguf", *sorted(ARCHS.glob("gemma3*.gguf"))[:1]],
    ids=lambda p: p.name,
)
def test_vulkan_terms_over_a_curve_equal_them_at_each_context(path: Path) -> None:
    """The chunk rules read at each context (`loop_over`) on a GPU planned with ggml-vulkan, at `-ub 2048`
    without flash attention (scores of several GiB at 131072 cells: on the host; 1-2 GiB: chunks)."""
    profile = profile_at(path)
    gpu = dataclasses.replace(assumed_gpu("G0", 48), vendor=Vendor.INTEL, backend_name="Vulkan0")
    machine = Machine((gpu,), HOST)
    placement = place_weights(profile, LaunchSettings(n_gpu_layers=99), machine)
    inputs = compute_inputs(n_kv_base=0, n_tok=2048, n_out=2048, flash_attn=False)
    plan = ComputePlan(profile, inputs, placement, (Vendor.INTEL,))
    assert plan.plans[0].max_chunk == 1 << 30
    for p in plan.plans:
        for t in p.terms():
            assert t.over(NB, NS).tolist() == [
                t.at(b, w) for b, w in zip(NB.tolist(), NS.tolist(), strict=True)
            ]
    rows = plan.totals_array(NB, NS)
    for i, (b, w) in enumerate(zip(NB.tolist(), NS.tolist(), strict=True)):
        assert [x.bytes for x in plan.evaluate(b, w)] == rows[:, i].tolist()
