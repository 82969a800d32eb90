"""What the compute model takes and gives: its inputs and each device's buffer, by part."""

from __future__ import annotations

from dataclasses import dataclass

from fitplan.core.memory.fork_graph import ForkGraph


@dataclass(frozen=True, slots=True)
class ComputeInputs:
    """What the compute reserve depends on, resolved from the context."""

    n_tok: int  # min(n_ctx, n_ubatch)
    n_out: int  # min(n_tok, n_outputs_max)
    n_kv_base: int  # cells per stream of the base (full-attention) cache; 0 when the model has none
    n_kv_swa: int  # cells per stream of the SWA cache; 0 when none
    flash_attn: bool
    cache_type_k: str
    cache_type_v: str
    op_offload: bool = True
    n_seqs: int = 1  # sequences in the reserved batch (n_seq_max): recurrent states are per sequence
    pipeline_parallel: bool = (
        False  # more than one device, everything offloaded, no overrides (llama-context.cpp)
    )
    # the KV and recurrent caches (and flash attention over them) on the layers' devices; False: -nkvo, on the host
    kv_offload: bool = True
    n_stream: int = 1  # KV streams (n_seq_max without a unified cache): n_kv_* are cells per stream
    # a fork's own attention graph, bound to the fork's settings (`memory.fork_graph`), with the output layer
    # reserved for every token and the host's output phase on its own; None = mainline's graph
    fork_graph: ForkGraph | None = None

    @property
    def fork_attention(self) -> bool:
        return self.fork_graph is not None


@dataclass(frozen=True, slots=True)
class ComputePart:
    label: str
    bytes: int


@dataclass(frozen=True, slots=True)
class ComputeBuffer:
    """One backend's compute buffer: its parts (peak live set) and total."""

    device: int | None  # GPU index, None = host
    parts: tuple[ComputePart, ...]

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.parts)

    def explain(self) -> str:
        return " + ".join(f"{p.label} {p.bytes / 2**20:.1f} MiB" for p in self.parts if p.bytes)
