"""The runtime reserve's named terms (fitplan.core.memory.reserve), each against a value derived from ggml-cuda.

Sources (llama.cpp 515e85511): ggml/src/ggml-cuda/common.cuh cublas_handle (the workspace), ggml-cuda.cu
ggml_cuda_pool_vmm (128-byte requests, 2 MiB granules, grows to the largest op), mmq.cu ggml_cuda_mul_mat_q (the
q8_1 activations: 144 bytes per 128 values of rows padded to 512, plus one tile of J = 128 columns; with ids the
int32 maps ids_src1 / ids_dst of n_tokens x n_expert_used and expert_bounds of n_expert + 1), mmq.cuh
launch_mul_mat_q (the stream-k fixup: n_sm x J x I floats, I = 128).
"""

from __future__ import annotations

from fitplan.core.base.devices import GIB, MIB, Device, DeviceKind, Vendor, assumed_gpu
from fitplan.core.memory.reserve import (
    MatmulShapes,
    compute_capability,
    cuda_reserve_terms,
    matmul_shapes,
    pool_bytes,
    pool_peak_bytes,
    reserve_terms,
)
from support.models import sparse
from support.tools import load_tool


def _nvidia(detail: str = "") -> Device:
    return Device("CUDA0", DeviceKind.GPU, 24 * GIB, 24 * GIB, Vendor.NVIDIA, detail=detail)


def test_cublas_workspace_follows_the_compute_capability() -> None:
    # common.cuh: (cc >= GGML_CUDA_CC_HOPPER) ? 32 MiB : 4 MiB; NVIDIA cc = 100 x major + 10 x minor.
    def ws(detail: str) -> int:
        return next(
            t.bytes for t in cuda_reserve_terms(_nvidia(detail), None) if t.label == "cuBLAS workspace"
        )

    assert ws("compute 8.9, driver 570.1") == 4 * MIB  # RTX 4090
    assert ws("compute 9.0") == 32 * MIB  # H100
    assert ws("compute 12.0") == 32 * MIB  # RTX 5090 (Blackwell consumer is above Hopper's 9.0)
    assert ws("") == 32 * MIB  # unknown: the larger
    assert compute_capability(_nvidia("compute 7.5, PCI 0000:01:00.0")) == (7, 5)


def test_dense_8b_pool_at_ub_512() -> None:
    shapes = matmul_shapes(sparse("llama-3.1-8b"), 512)
    # The widest quantized block weight is ffn_down, 14336 values per row (n_ff).
    assert (shapes.quant_k, shapes.expert_k) == (14336, 0)
    # q8_1: 512 rows x 14336 (already a multiple of 512) x 144/128 = 8,257,536 B, + one 128-column tile
    # 128 x 144 = 18,432 B -> 8,275,968 B (a multiple of 128); fixup 128 SMs x 128 x 128 x 4 B = 8,388,608 B.
    peak, op = pool_peak_bytes(shapes)
    assert peak == 8_275_968 + 8_388_608
    assert op.startswith("MMQ")
    assert pool_bytes(shapes) == 16 * MIB  # 15.89 MiB in whole 2 MiB granules


def test_moe_pool_at_ub_2048_is_the_expert_product() -> None:
    shapes = matmul_shapes(sparse("qwen3-30b-a3b"), 2048)
    # Experts: gate/up rows of n_embd 2048 values (down's are 768); 128 experts, 8 used per token.
    assert (shapes.expert_k, shapes.n_expert, shapes.n_expert_used) == (2048, 128, 8)
    # ids_src1 + ids_dst: 2 x 2048 x 8 x 4 B = 131,072 B; expert_bounds 129 x 4 = 516 -> 640 B;
    # q8_1 of 2048 x 8 = 16384 rows x 2048 x 144/128 = 37,748,736 B + tile 18,432 B; fixup 8,388,608 B.
    peak, op = pool_peak_bytes(shapes)
    assert peak == 131_072 + 640 + 37_748_736 + 18_432 + 8_388_608
    assert op.startswith("MoE")
    assert pool_bytes(shapes) == 46 * MIB  # 44.14 MiB -> 23 granules


def test_f16_weights_take_the_cublas_copies() -> None:
    # ggml_cuda_mul_mat_cublas_impl: src1 (512 x 4096 f32) as f16 = 4 MiB, the f16 result (512 x 14336) = 14 MiB.
    shapes = MatmulShapes(n_ubatch=512, f16_k=4096, f16_n=14336)
    assert pool_peak_bytes(shapes)[0] == 512 * 4096 * 2 + 512 * 14336 * 2
    assert pool_bytes(shapes) == 18 * MIB


def test_cuda_terms_are_named_and_sum_to_the_reserve() -> None:
    shapes = matmul_shapes(sparse("llama-3.1-8b"), 512)
    terms = reserve_terms(_nvidia("compute 8.9"), shapes)
    assert [(t.label, t.bytes) for t in terms] == [
        ("CUDA context", 350 * MIB),  # the named assumption
        ("cuBLAS workspace", 4 * MIB),
        ("CUDA pool", 16 * MIB),
    ]
    assert all(t.explanation for t in terms)
    # a GPU of unknown make is planned as CUDA
    assert reserve_terms(assumed_gpu("x", 24, Vendor.GENERIC), shapes)[0].label == "CUDA context"


def test_other_backends_keep_one_flat_assumption() -> None:
    def flat(vendor: Vendor) -> list[int]:
        dev = Device("g", DeviceKind.GPU, 16 * GIB, 16 * GIB, vendor)
        return [t.bytes for t in reserve_terms(dev, matmul_shapes(sparse("llama-3.1-8b"), 512))]

    assert flat(Vendor.AMD) == [512 * MIB]
    assert flat(Vendor.APPLE) == [256 * MIB]
    assert flat(Vendor.RPC) == [0]
    assert reserve_terms(Device("Host", DeviceKind.CPU, GIB, GIB)) == ()


def test_report_on_the_public_logs_gives_the_documented_gaps() -> None:
    """docs/runtime-reserve.md's table: the 3x RTX 4090 log (cc 8.9, model not stated: no pool term) has 451, 456
    and 456 MiB unaccounted; fitplan's context 350 + cuBLAS 4 = 354 MiB, so 97, 102 and 102 MiB under."""
    rows = load_tool("tools/reserve_report.py").comparisons()
    got = [(r.log, r.device, round(r.fitplan_mib), r.unaccounted_mib, round(r.diff_mib)) for r in rows]
    assert got == [
        ("llamacpp-pr15860-3x4090.json", "CUDA0", 354, 451, -97),
        ("llamacpp-pr15860-3x4090.json", "CUDA1", 354, 456, -102),
        ("llamacpp-pr15860-3x4090.json", "CUDA2", 354, 456, -102),
    ]
