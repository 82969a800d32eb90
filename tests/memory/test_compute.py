"""Compute buffer structure (fitplan.core.memory.compute): which graph tensors land on which backend.

Single-backend and RPC multi-device sizes are compared with the llama.cpp recordings in tests/estimate/test_accuracy.py;
these tests pin the structure, with the sizes derived in the comments.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fitplan.core.base.devices import GIB, MIB, Device, DeviceKind, Machine, Vendor, assumed_gpu, host_device
from fitplan.core.base.launch_settings import NGL_ALL, LaunchSettings, TensorOverride
from fitplan.core.engines.ik_compute import IkGraph
from fitplan.core.gguf.reader import read_header
from fitplan.core.memory.compute import ComputeInputs, ComputePlan, compute_buffers
from fitplan.core.memory.weights import place_weights
from fitplan.core.model.builder import build_profile
from fitplan.core.model.profile import ModelProfile
from support.compute import compute_inputs, parts
from support.models import TESTS, smoke

MODELS = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"
HOST = host_device(64 * GIB)


@pytest.fixture(scope="module")
def llama8b() -> ModelProfile:
    return build_profile(read_header(MODELS / "llama-3.1-8b.header.gguf", allow_incomplete=True))


def _cuda(n: int) -> tuple[Device, ...]:
    return tuple(dataclasses.replace(assumed_gpu(f"G{i}", 24), backend_name=f"CUDA{i}") for i in range(n))


def _inputs(**kw: object) -> ComputeInputs:
    return compute_inputs(**{"n_kv_base": 8192, "n_kv_swa": 0, **kw})


_parts = parts


def test_single_backend_llama(llama8b: ModelProfile) -> None:
    machine = Machine((), HOST)
    pl = place_weights(llama8b, LaunchSettings(), machine)
    (host,) = compute_buffers(llama8b, _inputs(), pl)
    parts = _parts(host)
    # Logits f32 [128256, 512] = 250.5 MiB beat the FFN intermediates (3 x 14336 x 512 x 4 B = 84 MiB).
    assert parts["logits"] == 4 * 128256 * 512
    # FA on: the f16 mask [8192 cells, 512 tokens].
    assert parts["masks"] == 2 * 8192 * 512
    # Recorded by llama.cpp for this model at -c 8192 (fit-params, placement grid -ngl 0): 313020416 bytes, that is
    # 298.5 MiB plus the small inputs: token ids of the plain and the mixed batch (2 x 512 x 4 B), the mixed batch's
    # slots (512 x 8), positions (512 x 4), K and V row indices (2 x 512 x 8), output ids (512 x 4) = 20480 B.
    assert parts["token ids, positions, indices"] == 20480
    assert host.bytes == int(298.5 * MIB) + 20480 == 313020416
    (host,) = compute_buffers(llama8b, _inputs(n_out=4), pl)
    assert _parts(host)["FFN intermediates"] == 4 * 512 * 3 * 14336


def test_flash_attention_off_adds_kq(llama8b: ModelProfile) -> None:
    pl = place_weights(llama8b, LaunchSettings(), Machine((), HOST))
    (host,) = compute_buffers(llama8b, _inputs(flash_attn=False, n_out=4), pl)
    parts = _parts(host)
    # KQ f32 [8192, 512, 32 heads] = 512 MiB plus Q [128 x 32 heads x 512] f32 = 8 MiB; the mask is f32.
    assert parts["KQ scores + Q"] == 4 * 8192 * 512 * 32 + 4 * 512 * 32 * 128
    assert parts["masks"] == 4 * 8192 * 512


def test_op_offload_runs_host_layers_on_the_first_gpu(llama8b: ModelProfile) -> None:
    machine = Machine(_cuda(1), HOST)
    pl = place_weights(llama8b, LaunchSettings(n_gpu_layers=0), machine)
    vendors = (Vendor.GENERIC,)
    gpu, host = compute_buffers(llama8b, _inputs(), pl, vendors)
    # The output layer is on the host: its matrix, output.weight q6_K [4096, 128256] (4096/256 * 210 * 128256 B),
    # is copied in under the logits, which the first GPU computes (the stand-in recording c8192-faon-ngl0: 693.48
    # MiB = four 8 MiB blocks + the 410.98 MiB copy + the 250.5 MiB logits); the host keeps the graph inputs.
    assert _parts(gpu)["op-offload weight copy"] == 4096 // 256 * 210 * 128256
    assert _parts(gpu)["logits"] == 4 * 128256 * 512
    assert "logits" not in _parts(host)
    # Batches under 32 tokens stay on the CPU; --no-op-offload turns it off; RPC backends never offload ops.
    gpu, host = compute_buffers(llama8b, _inputs(n_tok=16, n_out=16), pl, vendors)
    assert "op-offload weight copy" not in _parts(gpu)
    assert "logits" in _parts(host)
    # The output multiplication is offloaded by its result's rows, the output count, not the micro-batch: a full
    # batch with 4 outputs (llama-server's slots) runs its layers on the GPU but keeps the output matrix on the
    # host (the stand-in's llama-server draft with -ngld 0: no copy in the draft's CUDA0 buffer)
    gpu, _ = compute_buffers(llama8b, _inputs(n_out=4), pl, vendors)
    assert "op-offload weight copy" not in _parts(gpu)
    gpu, _ = compute_buffers(llama8b, _inputs(op_offload=False), pl, vendors)
    assert "op-offload weight copy" not in _parts(gpu)
    gpu, _ = compute_buffers(llama8b, _inputs(), pl, (Vendor.RPC,))
    assert gpu.bytes == 0


def test_offloaded_expert_copies_follow_each_other() -> None:
    """The allocator's list on a CUDA-shaped stand-in, Qwen3-30B-A3B with -cmoe at -ub 512 (the standin grid's
    c8192-faon-cmoe-ub512): above 24.01 MiB of blocks and inputs, gate's 108 MiB copy and its 12 MiB output, up's
    copy in gate's place and its output, the 12 MiB GLU output in the freed copies' space, down's 157.5 MiB copy
    above it and its 32 MiB output on top: 225.51 MiB at the peak, 201.5 MiB of it the FFN's."""
    from fitplan.core.memory.compute.ffn import offloaded_ffn_peak
    from fitplan.core.memory.compute.shapes import host_matrices

    profile = build_profile(read_header(MODELS / "qwen3-30b-a3b.header.gguf", allow_incomplete=True))
    pl = place_weights(profile, LaunchSettings(n_gpu_layers=NGL_ALL, cpu_moe=True), Machine(_cuda(1), HOST))
    mats = host_matrices(pl)[0]
    assert sorted(mats) == [f"blk.0.ffn_{k}_exps.weight" for k in ("down", "gate", "up")]
    assert offloaded_ffn_peak(profile, 0, 512, mats) == int(201.5 * MIB)


def test_cuda_flash_attention_copies_for_quantized_kv(llama8b: ModelProfile) -> None:
    machine = Machine(_cuda(1), HOST)
    pl = place_weights(llama8b, LaunchSettings(n_gpu_layers=NGL_ALL), machine)
    # 1 output: the layers' phase is the peak; at 65536 cells the attention with its copies beats the FFN
    q8 = _inputs(cache_type_k="q8_0", cache_type_v="q8_0", n_out=1, n_kv_base=65536)
    gpu, _ = compute_buffers(llama8b, q8, pl, (Vendor.NVIDIA,))
    # One layer's K and V views as f16: 2 x (8 x 128) x 65536 cells x 2 B = 256 MiB.
    assert _parts(gpu)["FA f16 K/V copies"] == 2 * 2 * 1024 * 65536
    # At 8192 cells the 32 MiB of copies live with the attention, below the FFN's 84 MiB: nothing on top (the
    # stand-in recordings: llama-3.1-8b with q8_0 caches within 0.1 MiB of f16 ones at every context)
    q8 = _inputs(cache_type_k="q8_0", cache_type_v="q8_0", n_out=1)
    gpu, _ = compute_buffers(llama8b, q8, pl, (Vendor.NVIDIA,))
    assert "FA f16 K/V copies" not in _parts(gpu)
    f16, _ = compute_buffers(llama8b, _inputs(n_out=1), pl, (Vendor.NVIDIA,))
    assert "FA f16 K/V copies" not in _parts(f16)
    # gate, up and the GLU output (3 x 28 MiB) over four block spaces, not five: one block fewer than the
    # residual blocks count (the allocator's list on the CUDA stand-in: 120.01 MiB at 4096 cells)
    ffn = 3 * 4 * 14336 * 512 - 4 * 4096 * 512
    assert _parts(gpu)["FFN intermediates"] == _parts(f16)["FFN intermediates"] == ffn
    gpu, _ = compute_buffers(llama8b, q8, pl, (Vendor.RPC,))
    assert "FA f16 K/V copies" not in _parts(gpu)


def test_multi_device_split(llama8b: ModelProfile) -> None:
    rpc = tuple(
        Device(f"RPC{i}", DeviceKind.GPU, 64 * GIB, 64 * GIB, Vendor.RPC, host=f"h:{i}") for i in range(2)
    )
    machine = Machine(rpc, HOST)
    pl = place_weights(llama8b, LaunchSettings(n_gpu_layers=16), machine)
    g0, g1, host = compute_buffers(llama8b, _inputs(), pl, (Vendor.RPC, Vendor.RPC))
    # Recorded (-c 8192 -ngl 16, two RPC servers), bytes: RPC0 113256448, RPC1 271056896, host 138432512.
    small = 512 * (4 + 8 + 8)  # positions i32, K and V row indices i64 (flash attention)
    # mask copy 8 + hidden state and residual 2 x 8 + FFN 84, and the small inputs' copies
    assert g0.bytes == 108 * MIB + small == 113256448
    assert g1.bytes == int(258.5 * MIB) == 271056896  # logits 250.5 + output norm 8
    # mask 8 + 5 x 8 + FFN 84, and the small inputs with the token ids, the mixed batch's slots and output ids
    assert host.bytes == 132 * MIB + 20480 == 138432512
    # Pipeline parallelism: the scheduler keeps GGML_SCHED_MAX_COPIES = 4 copies of every split input, never freed,
    # below the rest of the graph. Recorded (-c 8192, every layer on the two RPC servers), bytes: RPC0 255909888,
    # RPC1 371769344, host 117522432; the estimate is byte-exact.
    pl = place_weights(llama8b, LaunchSettings(n_gpu_layers=NGL_ALL), machine)
    g0, g1, host = compute_buffers(llama8b, _inputs(pipeline_parallel=True), pl, (Vendor.RPC, Vendor.RPC))
    block = 4 * 4096 * 512  # [n_embd, n_tok] f32 = 8 MiB
    slots = 512 * 8  # the mixed batch's slots, set on the first GPU
    # First GPU: 4 x (mask 8 + small + slots + the three embeddings blocks from the host), then the layer phase:
    # the embeddings copy, the two-block hole, the attention output (4 blocks) and the FFN (3 x 28 MiB).
    assert _parts(g0)["pipeline-parallel input copies"] == 4 * (2 * 8192 * 512 + small + slots + 3 * block)
    assert g0.bytes == 244 * MIB + 4 * (small + slots) == 255909888
    # Output GPU: 4 x (mask + small + out_ids i32 + l_out and the next norm from RPC0), then logits 250.5 + 8.
    assert g1.bytes == int(354.5 * MIB) + 4 * (small + 4 * 512) == 371769344
    # Host: 4 x (mask 8 + embeddings inputs 2 x 8 + small, token ids, slots, out_ids) + the two get_rows outputs.
    assert host.bytes == 112 * MIB + 4 * (small + 3 * 2048 + slots) == 117522432


def test_pipeline_parallel_three_devices(llama8b: ModelProfile) -> None:
    rpc = tuple(
        Device(f"RPC{i}", DeviceKind.GPU, 64 * GIB, 64 * GIB, Vendor.RPC, host=f"h:{i}") for i in range(3)
    )
    pl = place_weights(llama8b, LaunchSettings(n_gpu_layers=NGL_ALL), Machine(rpc, HOST))
    bufs = compute_buffers(llama8b, _inputs(pipeline_parallel=True), pl, (Vendor.RPC,) * 3)
    # Measured with three loopback RPC servers (-c 8192 -fa on, every layer offloaded): 244.055, 204.039,
    # 354.547 and 112.078 MiB. The middle GPU: 4 x (mask 8 + 2 hidden blocks 16 + small) + 3 blocks + FFN 84.
    small = 512 * (4 + 8 + 8)
    assert bufs[1].bytes == 204 * MIB + 4 * small
    assert [round(b.bytes / MIB, 3) for b in bufs] == [244.055, 204.039, 354.547, 112.078]


def test_pipeline_parallel_copies_follow_the_masks(llama8b: ModelProfile) -> None:
    rpc = tuple(
        Device(f"RPC{i}", DeviceKind.GPU, 64 * GIB, 64 * GIB, Vendor.RPC, host=f"h:{i}") for i in range(2)
    )
    pl = place_weights(llama8b, LaunchSettings(n_gpu_layers=NGL_ALL), Machine(rpc, HOST))
    g0, _, _ = compute_buffers(
        llama8b, _inputs(pipeline_parallel=True, n_kv_base=32768), pl, (Vendor.RPC, Vendor.RPC)
    )
    # -c 32768 -np 4 -kvu recorded RPC0 356573184 bytes: 4 x (mask 32 + 3 blocks 24 + small + slots) + 4 blocks
    # 32 + FFN 84.
    assert g0.bytes == 340 * MIB + 4 * 512 * (20 + 8) == 356573184


def test_ffn_follows_its_weights(llama8b: ModelProfile) -> None:
    rpc = (Device("RPC0", DeviceKind.GPU, 64 * GIB, 64 * GIB, Vendor.RPC, host="h:0"),)
    s = LaunchSettings(
        n_gpu_layers=NGL_ALL, tensor_overrides=(TensorOverride(r"\.ffn_(up|down|gate)\.", "CPU"),)
    )
    pl = place_weights(llama8b, s, Machine(rpc, HOST))
    gpu, host = compute_buffers(llama8b, _inputs(n_out=1), pl, (Vendor.RPC,))
    assert "FFN intermediates" not in _parts(gpu)
    assert _parts(host)["FFN intermediates"] == 4 * 512 * 3 * 14336


def test_vectorised_totals_match(llama8b: ModelProfile) -> None:
    machine = Machine(_cuda(2), HOST)
    pl = place_weights(llama8b, LaunchSettings(n_gpu_layers=20), machine)
    for fa in (True, False):
        plan = ComputePlan(llama8b, _inputs(flash_attn=fa), pl, (Vendor.NVIDIA, Vendor.NVIDIA))
        nb = np.array([256, 512, 4096, 100000], dtype=np.int64)
        ns = np.array([0, 256, 1536, 4608], dtype=np.int64)
        arr = plan.totals_array(nb, ns)
        for i in range(nb.size):
            assert [b.bytes for b in plan.evaluate(int(nb[i]), int(ns[i]))] == list(arr[:, i])


def _single(profile: ModelProfile, **kw: object) -> dict[str, int]:
    """The host's compute parts, without the small inputs (token ids, positions, indices: a few KiB)."""
    pl = place_weights(profile, LaunchSettings(), Machine((), HOST))
    (host,) = compute_buffers(profile, _inputs(**{"n_kv_base": 512, "n_out": 1, **kw}), pl)
    parts = _parts(host)
    parts.pop("token ids, positions, indices", None)
    return parts


def test_ungated_ffn_is_one_up_projection() -> None:
    # starcoder2 (no ffn_gate): the up projection [384, 512] fits the two-block hole, so attention is the peak:
    # Q + the FA output, 2 x 256 x 512 x 4 B = 1 MiB. Recorded: 4.02 MiB (the 0.02 are token ids and indices).
    parts = _single(smoke("starcoder2-dense"))
    assert "FFN intermediates" not in parts
    assert sum(parts.values()) == 4 * MIB  # mask 0.5 + 5 blocks 2.5 + 1


def test_fused_qkv_output_is_live_whole() -> None:
    # gpt2's attn_qkv output [3 x 256, 512] f32 = 1.5 MiB; recorded 4.52 MiB.
    parts = _single(smoke("gpt2-dense"))
    assert parts["attention / SSM scan"] == 4 * 768 * 512


def test_last_layer_ffn_reuses_the_freed_masks() -> None:
    # deepseek smoke model, -fa off: layer 1 (MoE, 2 experts x 384) is the last to read the f32 mask (1 MiB) and
    # V's indices (512 x 256 x 8 B = 1 MiB); with the embeddings block freed after layer 0 they leave 2.5 MiB,
    # where the first expert intermediate (1.5 MiB) goes: 3 x 1.5 - 1.5 = 3 MiB. Recorded: 7.52 MiB.
    parts = _single(smoke("deepseek-moe"), flash_attn=False)
    assert parts["FFN intermediates"] == 3 * MIB
    assert sum(parts.values()) == int(7.5 * MIB)
    # With flash attention the f16 mask (0.5 MiB) + the block leave 1 MiB: no room, the full 4.5 MiB set.
    assert _single(smoke("deepseek-moe"))["FFN intermediates"] == int(4.5 * MIB)


def test_mamba2_scan_takes_the_conv_input_space() -> None:
    # d_inner 512, d_state 128, 2 groups, 2 heads, d_conv 4: zxBCdt 1538 x 512, conv output 1024 x 512 and the
    # conv input 515 x 1024 (the scan output, 512 x 512 + 128 x 512, then fits in its space). Recorded 10.035 MiB.
    floats = 1538 * 512 + 1024 * 512 + 515 * 1024
    assert _single(smoke("granitehybrid-dense"))["attention / SSM scan"] == 4 * floats
    # Without attention layers no freed mask can take the contiguous copy of z [512, 512]: it goes on top.
    # Recorded 10.525 MiB.
    parts = _single(smoke("mamba2-dense"), n_kv_base=0)
    assert parts["attention / SSM scan"] == 4 * (floats + 512 * 512)


def test_ik_attention_max_batch_caps_kq() -> None:
    profile = build_profile(read_header(MODELS / "deepseek-v2-lite.header.gguf", allow_incomplete=True))
    pl = place_weights(profile, LaunchSettings(), Machine((), HOST))
    off = {"flash_attn": False, "n_kv_base": 32768, "n_out": 4}
    (mainline,) = compute_buffers(profile, _inputs(**off), pl)
    (ik,) = compute_buffers(profile, _inputs(fork_graph=IkGraph(), **off), pl)
    (capped,) = compute_buffers(profile, _inputs(fork_graph=IkGraph(amb_mib=256), **off), pl)
    # KQ [32768 cells, 512 tokens, 16 heads] f32: 64 MiB a head, 1 GiB uncapped in both; -amb 256 computes it in
    # chunks of 4 heads (256 MiB) while the concatenated outputs of the first three chunks (3 x 4 MiB) stay live;
    # ik recorded 1172.27 MiB without the cap and 416.27 MiB with it: 756 MiB less (tests/fixtures/ik_llama).
    kq = "KQ scores + Q"
    # mainline's absorbed query (the allocator replay of src/models/deepseek2.cpp): q's freed 6 MiB,
    # q_nope_absorbed 16 MiB and Qcur 18 MiB under the scores (the sparse recording at c32768 without flash
    # attention matches it to the byte); ik: Q and q_nope_absorbed next to them
    assert _parts(mainline)[kq] == (1024 + 6 + 16 + 18) * MIB
    assert _parts(ik)[kq] == (1024 + 18 + 16) * MIB
    assert _parts(ik)[kq] - _parts(capped)[kq] == 1024 * MIB - 256 * MIB - 12 * MIB
    assert ik.bytes - capped.bytes == 756 * MIB


def test_absorbed_mla_query_replayed_through_the_allocator() -> None:
    """DeepSeek-V3 (128 heads, MLA with kv_lora_rank 512, rope 64, key_length_mla 192, q_lora_rank 1536) at
    `-ub 512`: the allocator's peak (GGML_ALLOCATOR_DEBUG trace of the first layer) has q's freed space
    `[192 x 128, 512]` (48 MiB), q_nope_absorbed `[512, 128, 512]` (128 MiB), q_pe `[64, 128, 512]` (16 MiB) and
    Qcur `[576, 128, 512]` (144 MiB) above the blocks; the flash-attention output (128 MiB) later takes
    q_nope_absorbed's space. Recorded compute buffer at -c 4096: 410.02 MiB with flash attention, 1438.02 MiB
    without (the 1 GiB of KQ scores above Qcur)."""
    profile = build_profile(read_header(MODELS / "deepseek-v3.header.gguf", allow_incomplete=True))
    pl = place_weights(profile, LaunchSettings(), Machine((), HOST))
    (fa,) = compute_buffers(profile, _inputs(n_kv_base=4096), pl)
    assert _parts(fa)["attention / SSM scan"] == (48 + 128 + 16 + 144) * MIB
    (no_fa,) = compute_buffers(profile, _inputs(n_kv_base=4096, flash_attn=False), pl)
    assert _parts(no_fa)["KQ scores + Q"] == (48 + 128 + 16 + 144 + 1024) * MIB
    # at 512 cells the scores (128 MiB) fit into the 192 MiB the query's parts left under Qcur: no growth
    (short,) = compute_buffers(profile, _inputs(n_kv_base=512, flash_attn=False), pl)
    assert _parts(short)["KQ scores + Q"] == (48 + 128 + 16 + 144) * MIB
