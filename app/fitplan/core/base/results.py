"""The result types of an estimate: per device, per term, in bytes, each with how it was computed."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from fitplan.core.base.devices import Device, DeviceKind
from fitplan.core.base.launch_settings import LaunchSettings


class TermKind(StrEnum):
    WEIGHTS = "weights"
    KV = "kv"
    RECURRENT = "recurrent"
    COMPUTE = "compute"
    OUTPUT = "output"
    MMPROJ = "mmproj"
    DRAFT = "draft"
    RESERVE = (
        "reserve"  # per-GPU runtime reserve (CUDA context, cuBLAS workspace, pool): an explicit assumption
    )


#: The label of the projector's compute beyond its warm-up image (the largest image, at run time): not in the
#: buffers llama-server prints at start.
MMPROJ_IMAGES_LABEL = "mmproj images"

#: Order in which terms are stacked in tables and charts.
TERM_ORDER: tuple[TermKind, ...] = tuple(TermKind)


@dataclass(frozen=True, slots=True)
class Term:
    kind: TermKind
    bytes: int
    explanation: str  # one line: how this number was computed
    label: str = ""  # finer name inside the kind ("KV (SWA cache)", "CPU_REPACK"); empty = the kind


@dataclass(frozen=True, slots=True)
class DeviceEstimate:
    device: Device
    terms: tuple[Term, ...]
    # scratch that exists only while a prompt is processed (beellama's KVarN window): shown, not in used_bytes
    transient: tuple[Term, ...] = ()

    @property
    def used_bytes(self) -> int:
        return sum(t.bytes for t in self.terms)

    def bytes_of(self, kind: TermKind) -> int:
        return sum(t.bytes for t in self.terms if t.kind is kind)


@dataclass(frozen=True, slots=True)
class HostRuntimeBound:
    """Host RAM llama-server fills while it runs, shown with its upper bound (prompt cache, checkpoints)."""

    name: str
    max_bytes: int
    explanation: str


@dataclass(frozen=True, slots=True)
class ResolvedContext:
    """The context llama.cpp derives from the settings (padding, streams, batches)."""

    n_ctx: int
    n_ctx_seq: int
    n_seq_max: int
    n_stream: int
    kv_unified: bool
    n_batch: int
    n_ubatch: int
    n_outputs_max: int
    flash_attn: bool
    n_gpu_layers: int  # resolved count, including the output layer (0..n_layer_all+1)
    n_rs_seq: int = (
        0  # recurrent rollback snapshots per sequence (speculative decoding on rollback-capable archs)
    )
    embeddings: bool = False  # the context returns embeddings (--embedding): the output buffer holds them too


@dataclass(frozen=True, slots=True)
class Estimate:
    settings: LaunchSettings
    context: ResolvedContext
    devices: tuple[DeviceEstimate, ...]  # GPUs in order, then the host
    host_runtime: tuple[HostRuntimeBound, ...] = ()
    weights_file_backed: bool = True  # CPU-side weights are mmap'd (evictable page cache) vs anonymous memory
    warnings: tuple[str, ...] = ()
    # what a real load maps for the host's weights (`mapped_span_bytes`: the file's span, page cache, not counted)
    weights_mapped_span: int = 0
    assumptions: tuple[str, ...] = ()

    @property
    def gpu_host_share_bytes(self) -> int:
        """The host RAM the GPUs of this estimate take (unified memory, an APU's GTT: `Device.host_spill`)."""
        return sum(d.device.host_spill(d.used_bytes) for d in self.devices if d.device.kind is DeviceKind.GPU)
