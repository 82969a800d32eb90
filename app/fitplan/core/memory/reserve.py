"""Per-GPU runtime reserve: memory a GPU backend uses outside every llama.cpp buffer.

llama.cpp's memory breakdown lists model, context and compute buffers only; on a GPU the rest shows as
"unaccounted" (`common/fit.cpp:common_memory_breakdown_print`: `total - free - self`). For CUDA that is:

* the CUDA context of the process: the driver's per-context state plus the resident kernels of libggml-cuda
  (a fat binary with many template instances; lazy module loading, the default since CUDA 11.7, keeps only the
  kernels used resident). Typically 250-450 MiB;
* the cuBLAS workspace and handle state (`ggml_cuda_get_device().cublas_handle`), 4-32 MiB depending on the
  architecture (32 MiB on Hopper);
* the ggml CUDA memory pool (`ggml-cuda.cu:ggml_cuda_pool_vmm`, 2 MiB granularity, grows up to the largest request
  and never shrinks): q8_1 copies of the activations for MMQ/MMVQ, f16 dequantised weights when cuBLAS runs a
  quantized matrix, MoE id buffers. Tens to a few hundred MiB at n_ubatch = 512.

None of it can be read from a GGUF, so this is an explicit assumption shown as its own term, changeable by the user.
`--fit` covers the same memory with its 1024 MiB default margin (`-fitt`).
"""

from __future__ import annotations

from fitplan.core.base.devices import MIB, Device, DeviceKind, Vendor

#: CUDA / ROCm: context (~350 MiB) + cuBLAS workspace (~32 MiB) + pool (~130 MiB) at the default n_ubatch.
DEFAULT_CUDA_RESERVE = 512 * MIB
#: Vulkan / other discrete backends: driver context and descriptor pools; no cuBLAS, smaller pools.
DEFAULT_OTHER_GPU_RESERVE = 256 * MIB
#: Apple Metal: the command queue and residency sets; the pool is in the shared memory it reports.
DEFAULT_METAL_RESERVE = 256 * MIB
#: An RPC server reports its host's memory; its own runtime lives on that remote host.
DEFAULT_RPC_RESERVE = 0


def default_reserve_bytes(device: Device) -> int:
    """The assumed runtime reserve of one device (0 for the host)."""
    if device.kind is DeviceKind.CPU:
        return 0
    if device.vendor in (Vendor.NVIDIA, Vendor.AMD, Vendor.GENERIC):
        # a GPU of unknown make is planned as CUDA (see fitplan.core.memory.weights.gpu_backend)
        return DEFAULT_CUDA_RESERVE
    if device.vendor is Vendor.APPLE:
        return DEFAULT_METAL_RESERVE
    if device.vendor is Vendor.RPC:
        return DEFAULT_RPC_RESERVE
    return DEFAULT_OTHER_GPU_RESERVE


def reserve_explanation(device: Device, reserve_bytes: int, user_set: bool) -> str:
    mib = reserve_bytes / MIB
    if user_set:
        return f"runtime reserve set by the user: {mib:.0f} MiB"
    if device.vendor in (Vendor.NVIDIA, Vendor.AMD, Vendor.GENERIC):
        return f"assumed {mib:.0f} MiB: CUDA context + cuBLAS workspace + ggml CUDA pool (not in llama.cpp's buffers)"
    if device.vendor is Vendor.RPC:
        return "RPC server: its runtime memory is on the remote host"
    return f"assumed {mib:.0f} MiB: driver context and backend pools (not in llama.cpp's buffers)"
