"""Tokens per second of one placement: time per token = what each device reads or computes / how fast it does it.

Generation (one token per step, `ggml_backend_sched_graph_compute` runs the splits one after the other):

* each GPU streams the weights it holds plus its KV cache at the depth reached (`ggml-cuda/mmvq.cu`: batch-1
  matrix-vector products, `ggml_cuda_should_use_mmvq`, are bound by memory bandwidth), at a fitted share of its
  peak bandwidth, plus a fitted fixed time per layer (kernel launches and small ops);
* the host does the same for the layers and experts left on it (the CPU backend, bandwidth-bound too);
* each device change of the layer chain costs a fitted time (`ggml-backend.cpp:ggml_backend_sched_compute_splits`
  copies the split's input and synchronises).

Prompt processing (batches of `-ub` tokens):

* each GPU's matrix work at a fitted share of its FP16 throughput (`ggml-cuda/mmq.cu:ggml_cuda_should_use_mmq`
  int8 tensor-core kernels or cuBLAS, `ggml_cuda_mul_mat`);
* weights left on the host are computed by the first GPU when the batch has at least 32 tokens
  (`ggml-cuda.cu:ggml_backend_cuda_device_offload_op`, `op_offload_min_batch_size`, used by
  `ggml-backend.cpp:ggml_backend_sched_backend_id_from_cur`), which copies them over PCIe once per batch; for
  routed experts only those some token of the batch uses (`ggml_backend_sched_compute_splits`: "copying only the
  experts that are used"), `1 - (1 - k/E)^n_ubatch` of them on average;
* below 32 tokens, or without a GPU, the host's CPU computes them.

Row split (`-sm row`) and tensor split are computed as layer split (an assumption the output names).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache

from fitplan.core.base.devices import Vendor
from fitplan.core.base.files import package_text
from fitplan.core.base.numbers import loads_json
from fitplan.core.speed.figures import DeviceFigures, MachineFigures
from fitplan.core.speed.work import DeviceWork, ModelWork

#: Where the fitted constants and the held-out bands are, inside the package (tools/speed_report.py --write).
CALIBRATION_PATH = "data/speed_calibration.json"
#: ggml-cuda.cu: GGML_OP_OFFLOAD_MIN_BATCH defaults to 32 (Metal and Vulkan use the same rule).
OP_OFFLOAD_MIN_BATCH = 32


class Backend(StrEnum):
    CUDA = "cuda"
    ROCM = "rocm"
    VULKAN = "vulkan"
    METAL = "metal"


class SpeedClass(StrEnum):
    FULL = "full offload"
    PARTIAL = "partial -ngl"
    EXPERTS = "expert offload"
    MULTI = "multi-GPU"
    CPU = "CPU only"


def backend_of(vendor: Vendor) -> Backend:
    """The ggml backend fitplan plans a GPU of this make with (as `memory.weights.gpu_backend`)."""
    if vendor is Vendor.AMD:
        return Backend.ROCM
    if vendor is Vendor.APPLE:
        return Backend.METAL
    if vendor is Vendor.INTEL:
        return Backend.VULKAN
    return Backend.CUDA


@dataclass(frozen=True, slots=True)
class BackendConstants:
    tg_efficiency: float  # share of peak bandwidth a generated token's reads reach
    layer_us: float  # fixed microseconds per layer per generated token
    pp_efficiency: float  # share of peak FP16 throughput prompt processing reaches (quantized weights)
    #: the same for unquantized weights and the attention (a float GEMM); 0: as pp_efficiency (no fit rows)
    pp_efficiency_16: float = 0.0

    @property
    def pp_share_16(self) -> float:
        return self.pp_efficiency_16 or self.pp_efficiency


@dataclass(frozen=True, slots=True)
class Calibration:
    backends: dict[str, BackendConstants]
    host_efficiency: float  # share of the host RAM bandwidth the CPU backend reaches at generation
    link_efficiency: float  # share of the PCIe bandwidth the weight uploads reach
    split_us: float  # microseconds per device change of the layer chain per token
    host_layer_us: float  # fixed microseconds per layer computed on the host per token
    #: per class and kind ("full offload/tg"): the held-out error's 80th percentile of |ln(predicted/measured)|
    bands: dict[str, float] = field(default_factory=dict)
    default_band: float = 0.5

    def constants(self, backend: Backend) -> BackendConstants:
        return self.backends.get(backend.value) or self.backends["cuda"]

    def band(self, cls: SpeedClass, kind: str) -> float:
        return self.bands.get(f"{cls.value}/{kind}", self.bands.get(f"all/{kind}", self.default_band))

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        doc = loads_json(text)
        c = doc["constants"]
        return cls(
            backends={k: BackendConstants(**v) for k, v in c["backends"].items()},
            host_efficiency=float(c["host_efficiency"]),
            link_efficiency=float(c["link_efficiency"]),
            split_us=float(c["split_us"]),
            host_layer_us=float(c["host_layer_us"]),
            bands={k: float(v) for k, v in doc.get("bands", {}).items()},
        )


#: Before any fit: the peak figures themselves and no fixed costs (what the report's fit starts from).
UNFITTED = Calibration(
    backends={b.value: BackendConstants(1.0, 0.0, 1.0) for b in Backend},
    host_efficiency=1.0,
    link_efficiency=1.0,
    split_us=0.0,
    host_layer_us=0.0,
)


@cache
def load_calibration() -> Calibration:
    text = package_text(CALIBRATION_PATH)
    return Calibration.from_json(text)


@dataclass(frozen=True, slots=True)
class DeviceTime:
    """One device's share of a generated token's time."""

    name: str
    read_bytes: float  # weights + KV read per generated token
    tg_seconds: float


@dataclass(frozen=True, slots=True)
class Breakdown:
    """The terms of one prediction, in seconds per token (what the calibration fits)."""

    tg_gpu_bytes: float  # sum over GPUs of bytes / peak bandwidth
    tg_gpu_layers: int
    tg_host_bytes: float  # host bytes / host bandwidth
    tg_host_layers: int
    boundaries: int
    pp_gpu_flops: float  # sum over GPUs of quantized-weight FLOPs / peak throughput
    pp_upload: float  # bytes uploaded per token / link bandwidth
    pp_host: float  # seconds of host compute per token (CPU FLOPs / CPU throughput)
    pp_fixed: float  # weight reads per batch and other uncalibrated seconds
    pp_gpu_flops_16: float = 0.0  # the same for unquantized weights and the attention


def _gpu_backends(
    figs: MachineFigures, backends: tuple[Backend, ...], work: ModelWork
) -> tuple[Backend, ...]:
    return tuple(backends[i] if i < len(backends) else Backend.CUDA for i in range(len(work.gpus)))


@dataclass(frozen=True, slots=True)
class Prediction:
    generation_tps: float
    prompt_tps: float
    devices: tuple[DeviceTime, ...]
    breakdown: Breakdown


def used_expert_fraction(work: ModelWork, n_tokens: int) -> float:
    """Share of the routed experts some token of a batch of `n_tokens` selects, on average (uniform routing)."""
    if not work.n_expert:
        return 1.0
    return 1.0 - (1.0 - work.expert_share) ** max(n_tokens, 1)


def _tg_gpu(
    w: DeviceWork, f: DeviceFigures, k: BackendConstants, share: float, depth: int
) -> tuple[float, float]:
    read = w.read_bytes(share) + w.kv_read(depth)
    return read, read / (f.bandwidth * k.tg_efficiency) + w.n_layers * k.layer_us * 1e-6


def predict(
    work: ModelWork,
    figs: MachineFigures,
    backends: tuple[Backend, ...],
    cal: Calibration,
    *,
    depth: int = 0,
    n_prompt: int = 512,
    n_ubatch: int = 512,
    n_batch: int = 2048,
) -> Prediction:
    """Generation t/s at `depth` tokens of context and prompt t/s for a prompt of `n_prompt` tokens.

    `figs.gpus[i]` and `backends[i]` describe `work.gpus[i]` (the active GPUs, in order)."""
    share = work.expert_share
    kinds = _gpu_backends(figs, backends, work)
    times: list[DeviceTime] = []
    tg = 0.0
    bytes_over_bw = 0.0
    layers = 0
    for w, f, b in zip(work.gpus, figs.gpus, kinds, strict=False):
        read, t = _tg_gpu(w, f, cal.constants(b), share, depth)
        times.append(DeviceTime(f.name, read, t))
        tg += t
        bytes_over_bw += read / f.bandwidth
        layers += w.n_layers
    h, hf = work.host, figs.host
    host_read = h.read_bytes(share) + h.kv_read(depth)
    t_host = host_read / (hf.bandwidth * cal.host_efficiency) + h.n_layers * cal.host_layer_us * 1e-6
    if host_read > 0:
        times.append(DeviceTime(hf.name, host_read, t_host))
    tg += t_host + work.boundaries * cal.split_us * 1e-6
    pp_t, parts = _prompt_seconds(work, figs, kinds, cal, n_prompt, n_ubatch, n_batch)
    bd = Breakdown(
        tg_gpu_bytes=bytes_over_bw,
        tg_gpu_layers=layers,
        tg_host_bytes=host_read / hf.bandwidth,
        tg_host_layers=h.n_layers,
        boundaries=work.boundaries,
        pp_gpu_flops=parts[0],
        pp_upload=parts[1],
        pp_host=parts[2],
        pp_fixed=parts[3],
        pp_gpu_flops_16=parts[4],
    )
    return Prediction(
        1.0 / tg if tg > 0 else math.inf, 1.0 / pp_t if pp_t > 0 else math.inf, tuple(times), bd
    )


def _prompt_seconds(
    work: ModelWork,
    figs: MachineFigures,
    kinds: tuple[Backend, ...],
    cal: Calibration,
    n_prompt: int,
    n_ubatch: int,
    n_batch: int = 2048,
) -> tuple[float, tuple[float, float, float, float, float]]:
    """Seconds per prompt token, and its parts (quantized-weight GPU FLOPs/peak, upload/link, host seconds, fixed
    seconds, unquantized-weight and attention GPU FLOPs/peak)."""
    ub = max(1, min(n_ubatch, n_prompt))
    avg_depth = n_prompt / 2
    used = used_expert_fraction(work, ub)
    share = work.expert_share
    stages: list[float] = []
    q_over_peak = f16_over_peak = fixed = 0.0
    for w, f, b in zip(work.gpus, figs.gpus, kinds, strict=False):
        fl16 = w.matrix_flops_16(share) + w.attn_flops(avg_depth)
        flq = w.matrix_flops(share) - w.matrix_flops_16(share)
        k = cal.constants(b)
        per_batch = (w.dense_bytes + w.expert_bytes * used) / f.bandwidth / ub
        stages.append(flq / (f.q_flops * k.pp_efficiency) + fl16 / (f.flops * k.pp_share_16) + per_batch)
        q_over_peak += flq / f.q_flops
        f16_over_peak += fl16 / f.flops
        fixed += per_batch
    overlap = pipeline_factor(stages, work.pipeline, n_prompt, ub, n_batch)
    t = sum(stages) * overlap
    q_over_peak, f16_over_peak, fixed = q_over_peak * overlap, f16_over_peak * overlap, fixed * overlap
    h, hf = work.host, figs.host
    host_matrix = h.matrix_flops(share)
    upload = 0.0
    host_s = h.attn_flops(avg_depth) / hf.flops
    if work.gpus and ub >= OP_OFFLOAD_MIN_BATCH and host_matrix > 0:
        f0, k0 = figs.gpus[0], cal.constants(kinds[0])
        h16 = h.matrix_flops_16(share)
        t += (host_matrix - h16) / (f0.q_flops * k0.pp_efficiency) + h16 / (f0.flops * k0.pp_share_16)
        q_over_peak += (host_matrix - h16) / f0.q_flops
        f16_over_peak += h16 / f0.flops
        upload = (h.dense_bytes + h.expert_bytes * used) / f0.link / ub
        t += upload / cal.link_efficiency
    else:
        host_s += host_matrix / hf.flops
    t += host_s + work.boundaries * cal.split_us * 1e-6 / ub
    return t, (q_over_peak, upload, host_s, fixed, f16_over_peak)


def pipeline_factor(stages: list[float], pipeline: bool, n_prompt: int, ub: int, n_batch: int) -> float:
    """The share of the GPUs' summed time a prompt takes when llama.cpp pipelines its micro-batches.

    One `llama_decode` call takes `n_batch` tokens in `k` micro-batches; with pipeline parallelism GPU i works on
    micro-batch j+1 while GPU i+1 works on j, so the call takes sum(stage) + (k - 1) x max(stage) instead of
    k x sum(stage) (the pipeline's fill plus its slowest stage per further micro-batch). 1 without pipelining
    or with one micro-batch per call."""
    total = sum(stages)
    if not pipeline or len(stages) < 2 or total <= 0:
        return 1.0
    k = max(1, math.ceil(min(max(n_batch, 1), n_prompt) / ub))
    return (total + (k - 1) * max(stages)) / (k * total)
