"""The hook through which a fork's own attention graph replaces mainline's in the compute model.

Mainline `fitplan.core.memory` knows no fork by name. An engine whose graph differs supplies a `ForkGraph` in
`ComputeInputs.fork_graph`, bound to that engine's own settings (its modes and chunk sizes travel inside the
object, opaque to mainline); the compute model asks it only for what differs and keeps everything else
mainline's. A compute model with a fork graph also reserves the output layer for every token and runs the
host's output phase on its own.
"""

from __future__ import annotations

from typing import Protocol

from fitplan.core.model.profile import ModelProfile


class ForkGraph(Protocol):
    """What a fork's attention graph allocates where mainline's would allocate something else."""

    def has_mla(self, profile: ModelProfile) -> bool:
        """The fork runs this model's attention as MLA (its latent cache), whatever the file says."""
        ...

    def mla_v_copy_row(self, profile: ModelProfile, flash_attn: bool, cache_type_v: str) -> int:
        """Bytes per cell of the transposed latent copy the fork keeps for V (0: none)."""
        ...

    def attention_peak(
        self,
        profile: ModelProfile,
        n_kv: int,
        n_tok: int,
        q_bytes: int,
        *,
        flash_attn: bool,
        cache_type: str,
        gpu_backend: bool,
    ) -> int:
        """The fork's attention at its peak for one attention group (`q_bytes`: mainline's Q there; `cache_type`:
        the graph's K type; `gpu_backend`: a GPU is in use)."""
        ...
