"""Per-GPU runtime reserve: memory a GPU backend uses outside every llama.cpp buffer.

llama.cpp's memory breakdown lists model, context and compute buffers only; on a GPU the rest shows as
"unaccounted" (`common/fit.cpp:common_memory_breakdown_print`: `total - free - self`). No dry run sees it. For CUDA
it is a sum of named terms per device (`cuda_reserve_terms`), each from ggml-cuda's source (commit 515e85511):

* the CUDA context of the process: the driver's per-context state plus the resident kernels of libggml-cuda (lazy
  module loading keeps only the kernels used resident). The driver decides its size: an explicit, named assumption
  (`ASSUMED_CUDA_CONTEXT`);
* the cuBLAS workspace (`ggml/src/ggml-cuda/common.cuh:ggml_backend_cuda_context::cublas_handle`): 32 MiB on compute
  capability >= 9.0 (Hopper and later, RTX 50xx included), else 4 MiB, one per device and stream;
* the ggml CUDA pool for temporaries (`ggml-cuda.cu:ggml_cuda_pool_vmm`): every op frees what it takes before the
  next op runs, so the pool grows to the largest single op's temporaries, rounded up to the VMM granularity, and
  never shrinks. At a prompt batch that op is a quantized matrix product (`mmq.cu:ggml_cuda_mul_mat_q`: a q8_1
  copy of the activations plus the stream-k fixup buffer; for MoE also the expert id maps), or for f16/bf16 weights
  the cuBLAS path's f16 copies (`ggml-cuda.cu:ggml_cuda_mul_mat_cublas_impl`);
* CUDA graphs (on by default for llama.cpp builds: `CMakeLists.txt` sets `GGML_CUDA_GRAPHS_DEFAULT`): the captured
  graphs' executables live in driver memory; no source rule gives their size, so they are part of the context
  assumption.

Flash attention's pool temporaries (`fattn-common.cuh:launch_fattn`: the stream-k `dst_tmp_meta`, `KV_max`) belong
to their own op and are smaller than the matrix products' at the shapes fitplan plans; the f16 copies of a quantized
KV cache are in the compute buffer at this commit (`ggml_cuda_flash_attn_ext_get_f16_extra_data`), not in the pool.
Non-CUDA backends (ROCm included: hipBLAS has no workspace and dequantizes differently) keep one flat assumption.
A user-set reserve replaces the sum. `--fit` covers the same memory with its 1024 MiB default margin (`-fitt`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fitplan.core.base.devices import MIB, Device, DeviceKind, Vendor
from fitplan.core.base.numbers import int_or_none
from fitplan.core.gguf.ggml_types import lookup
from fitplan.core.model.profile import ModelProfile, TensorRole

#: Assumption: the CUDA context (driver state, resident libggml-cuda kernels, CUDA graph executables). The driver
#: version, the GPU and the kernels used decide it; see docs/runtime-reserve.md for the range public logs imply.
ASSUMED_CUDA_CONTEXT = 350 * MIB
#: Assumption: streaming multiprocessors, for the MMQ stream-k fixup buffer (one tile of partial sums per SM).
#: fitplan does not know the GPU's SM count; 128 is an RTX 4090's (an RTX 3090 has 82, an H100 SXM 132).
ASSUMED_SM_COUNT = 128
#: common.cuh:cublas_handle: the workspace given to cublasSetWorkspace.
CUBLAS_WORKSPACE_HOPPER = 32 * MIB  # cc >= GGML_CUDA_CC_HOPPER (9.0)
CUBLAS_WORKSPACE_OLDER = 4 * MIB
#: ggml-cuda.cu:ggml_cuda_pool_vmm: cuMemGetAllocationGranularity(RECOMMENDED), 2 MiB on NVIDIA GPUs.
POOL_GRANULARITY = 2 * MIB
#: ggml_cuda_pool_vmm::alloc rounds every request up to 128 bytes.
POOL_ALIGNMENT = 128
#: mmq.cuh: block_q8_1_mmq holds 128 values in 144 bytes (128 int8 + 16 bytes of scales / partial sums).
Q8_1_MMQ_VALUES = 128
Q8_1_MMQ_BYTES = 144
#: common.cuh MATRIX_ROW_PADDING: the activations' rows are padded to this many values.
MATRIX_ROW_PADDING = 512
#: mmq-config-*.cuh: the largest tile (J columns x I rows) on NVIDIA (Turing to Blackwell): J = I = 128.
MMQ_TILE_J = 128
MMQ_TILE_I = 128

#: Vulkan / other discrete backends: driver context and descriptor pools; no cuBLAS, smaller pools.
DEFAULT_OTHER_GPU_RESERVE = 256 * MIB
#: ROCm (ggml-cuda built for HIP): the flat assumption of before (context + hipBLAS + pool).
DEFAULT_ROCM_RESERVE = 512 * MIB
#: Apple Metal: the command queue and residency sets; the pool is in the shared memory it reports.
DEFAULT_METAL_RESERVE = 256 * MIB
#: An RPC server reports its host's memory; its own runtime lives on that remote host.
DEFAULT_RPC_RESERVE = 0

_CC_RE = re.compile(r"compute (\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class ReserveTerm:
    """One named part of a device's runtime reserve."""

    label: str
    bytes: int
    explanation: str  # how it was derived and from which llama.cpp function, or that it is an assumption


@dataclass(frozen=True, slots=True)
class MatmulShapes:
    """The matrix products a GPU runs for one prompt batch, as far as the CUDA pool depends on them."""

    n_ubatch: int
    quant_k: int = 0  # longest row (ne0) of a quantized 2-D block weight: the q8_1 copy's width
    f16_k: int = 0  # longest row of an f16/bf16 2-D block weight (cuBLAS path)
    f16_n: int = 0  # most rows (ne1) of an f16/bf16 2-D block weight
    expert_k: int = 0  # longest row of a quantized 3-D expert weight
    n_expert: int = 0
    n_expert_used: int = 0


def matmul_shapes(profile: ModelProfile, n_ubatch: int) -> MatmulShapes:
    """What the pool term needs from the model: the widest block weights multiplied at `n_ubatch` tokens.

    The output projection multiplies only the batch's outputs and the embeddings are gathered rows, so only the
    repeating blocks' weights count."""
    quant_k = f16_k = f16_n = expert_k = 0
    skip = (TensorRole.TOKEN_EMBD, TensorRole.POS_EMBD, TensorRole.OUTPUT, TensorRole.NORM)
    for t in profile.tensors:
        if t.layer is None or t.role in skip or len(t.shape) < 2:
            continue
        gt = lookup(t.ggml_type)
        if gt is None:
            continue
        if len(t.shape) >= 3 and t.shape[2] > 1 and t.role is TensorRole.EXPERTS:
            if gt.quantized:
                expert_k = max(expert_k, t.shape[0])
        elif gt.quantized:
            quant_k = max(quant_k, t.shape[0])
        elif gt.name in ("F16", "BF16"):
            f16_k = max(f16_k, t.shape[0])
            f16_n = max(f16_n, t.shape[1])
    moe = profile.moe
    return MatmulShapes(
        n_ubatch=n_ubatch,
        quant_k=quant_k,
        f16_k=f16_k,
        f16_n=f16_n,
        expert_k=expert_k,
        n_expert=moe.n_expert if moe is not None and expert_k else 0,
        n_expert_used=moe.n_expert_used if moe is not None and expert_k else 0,
    )


def _a(n: int) -> int:
    """One pool request as ggml_cuda_pool_vmm::alloc takes it (rounded up to 128 bytes)."""
    return -(-n // POOL_ALIGNMENT) * POOL_ALIGNMENT


def _mmq_tile_j(n_cols: int) -> int:
    """mmq.cuh ggml_cuda_mmq_get_J_max: the widest tile (a multiple of 8, at most 128) for `n_cols` columns."""
    return max(8, min(MMQ_TILE_J, n_cols - n_cols % 8))


def _mmq_bytes(n_rows: int, k: int, n_cols_tile: int, n_sm: int) -> int:
    """mmq.cu:ggml_cuda_mul_mat_q: the q8_1 copy of `n_rows` activation rows of `k` values (padded to 512) plus
    one tile's padding, and mmq.cuh:launch_mul_mat_q's stream-k fixup buffer (n_sm tiles of J x I floats), held at
    the same time."""
    j = _mmq_tile_j(n_cols_tile)
    k_pad = -(-k // MATRIX_ROW_PADDING) * MATRIX_ROW_PADDING
    q8 = _a(n_rows * k_pad * Q8_1_MMQ_BYTES // Q8_1_MMQ_VALUES + j * Q8_1_MMQ_BYTES)
    fixup = _a(n_sm * j * MMQ_TILE_I * 4)
    return q8 + fixup


def pool_peak_bytes(shapes: MatmulShapes, n_sm: int = ASSUMED_SM_COUNT) -> tuple[int, str]:
    """The largest single op's pool requests (before the granularity), and which op it is."""
    ub = shapes.n_ubatch
    candidates: list[tuple[int, str]] = [(0, "none")]
    if shapes.quant_k:
        candidates.append(
            (_mmq_bytes(ub, shapes.quant_k, ub, n_sm), f"MMQ, {ub} x {shapes.quant_k} activations")
        )
    if shapes.f16_k:
        # ggml_cuda_mul_mat_cublas_impl: src1 converted to f16, the f16 result before its conversion to f32
        candidates.append(
            (_a(ub * shapes.f16_k * 2) + _a(ub * shapes.f16_n * 2), f"cuBLAS f16, {ub} x {shapes.f16_k}")
        )
    if shapes.expert_k and shapes.n_expert_used:
        rows = ub * shapes.n_expert_used
        # ggml_cuda_mul_mat_q with ids: ids_src1, ids_dst (int32 per token and expert), expert_bounds
        ids = 2 * _a(rows * 4) + _a((shapes.n_expert + 1) * 4)
        candidates.append(
            (
                ids + _mmq_bytes(rows, shapes.expert_k, ub, n_sm),
                f"MoE MMQ, {ub} x {shapes.n_expert_used} experts",
            )
        )
    return max(candidates)


def pool_bytes(shapes: MatmulShapes, n_sm: int = ASSUMED_SM_COUNT) -> int:
    """ggml_cuda_pool_vmm grows by whole granules to the largest op's requests and never shrinks."""
    peak, _ = pool_peak_bytes(shapes, n_sm)
    return -(-peak // POOL_GRANULARITY) * POOL_GRANULARITY


def compute_capability(device: Device) -> tuple[int, int] | None:
    """The compute capability NVML reported for a detected GPU ("compute 8.9" in its detail), else None."""
    m = _CC_RE.search(device.detail)
    if m is None:
        return None
    major, minor = int_or_none(m.group(1), 0, 99), int_or_none(m.group(2), 0, 99)
    return (major, minor) if major is not None and minor is not None else None


def cublas_workspace_bytes(cc: tuple[int, int] | None) -> int:
    """common.cuh:cublas_handle: 32 MiB from compute capability 9.0, else 4 MiB; unknown: the larger."""
    if cc is not None and cc < (9, 0):
        return CUBLAS_WORKSPACE_OLDER
    return CUBLAS_WORKSPACE_HOPPER


def cuda_reserve_terms(device: Device, shapes: MatmulShapes | None) -> tuple[ReserveTerm, ...]:
    """The named terms of one CUDA device's runtime reserve (see the module docstring)."""
    cc = compute_capability(device)
    cc_text = f"compute capability {cc[0]}.{cc[1]}" if cc else "compute capability unknown: the larger"
    terms = [
        ReserveTerm(
            "CUDA context",
            ASSUMED_CUDA_CONTEXT,
            f"assumed {ASSUMED_CUDA_CONTEXT / MIB:.0f} MiB: driver context, resident libggml-cuda kernels and "
            "CUDA graph executables (the driver decides; not in llama.cpp's buffers)",
        ),
        ReserveTerm(
            "cuBLAS workspace",
            cublas_workspace_bytes(cc),
            f"{cublas_workspace_bytes(cc) / MIB:.0f} MiB ({cc_text}; ggml-cuda common.cuh cublas_handle)",
        ),
    ]
    if shapes is not None:
        peak, op = pool_peak_bytes(shapes)
        terms.append(
            ReserveTerm(
                "CUDA pool",
                pool_bytes(shapes),
                f"largest op's temporaries {peak / MIB:.1f} MiB ({op}, stream-k fixup for {ASSUMED_SM_COUNT} SMs "
                f"assumed) in whole {POOL_GRANULARITY // MIB} MiB granules (ggml_cuda_pool_vmm)",
            )
        )
    return tuple(terms)


def _plans_as_cuda(device: Device) -> bool:
    # a GPU of unknown make is planned as CUDA (see fitplan.core.memory.weights.gpu_backend)
    return device.vendor in (Vendor.NVIDIA, Vendor.GENERIC)


def reserve_terms(device: Device, shapes: MatmulShapes | None = None) -> tuple[ReserveTerm, ...]:
    """The assumed runtime reserve of one device, term by term (none for the host)."""
    if device.kind is DeviceKind.CPU:
        return ()
    if _plans_as_cuda(device):
        return cuda_reserve_terms(device, shapes)
    if device.vendor is Vendor.RPC:
        return (
            ReserveTerm("RPC", DEFAULT_RPC_RESERVE, "RPC server: its runtime memory is on the remote host"),
        )
    if device.vendor is Vendor.AMD:
        flat = DEFAULT_ROCM_RESERVE
        what = "HIP context + hipBLAS + ggml pool"
    elif device.vendor is Vendor.APPLE:
        flat, what = DEFAULT_METAL_RESERVE, "command queue and residency sets"
    else:
        flat, what = DEFAULT_OTHER_GPU_RESERVE, "driver context and backend pools"
    return (
        ReserveTerm("runtime", flat, f"assumed {flat / MIB:.0f} MiB: {what} (not in llama.cpp's buffers)"),
    )


def default_reserve_bytes(device: Device, shapes: MatmulShapes | None = None) -> int:
    """The assumed runtime reserve of one device (0 for the host): the sum of its terms."""
    return sum(t.bytes for t in reserve_terms(device, shapes))


#: The estimate's assumption line for CUDA GPUs.
CUDA_RESERVE_ASSUMPTION = (
    f"runtime reserve per CUDA GPU: CUDA context assumed {ASSUMED_CUDA_CONTEXT // MIB} MiB; cuBLAS workspace and "
    "pool derived from ggml-cuda (see docs/runtime-reserve.md)"
)


def user_reserve_explanation(reserve_bytes: int) -> str:
    return f"runtime reserve set by the user: {reserve_bytes / MIB:.0f} MiB"
