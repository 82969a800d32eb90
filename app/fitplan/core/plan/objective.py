"""The planner's objective: which of two plans is better. Its one written home.

The best plan, in order (each criterion only breaks the ties of the ones before it):

1. it fits: every device within its capacity minus the margins (`verdict`, with the `MarginPolicy` of `usage`:
   1024 MiB per GPU, like llama.cpp's `--fit-target`, and 1024 MiB of host RAM, by default);
2. its context is at least the floor: the pinned `-c`, else `--min-ctx`, else 4096 tokens per sequence (llama.cpp's
   `--fit-ctx`), never above the training length;
3. it keeps the fewest weight bytes off the GPUs, counted layer first: the most layers on the GPUs (`-ngl`), then
   the fewest expert bytes on the CPU (`--n-cpu-moe`; `PlacementSpace.off_gpu_bytes`). A layer on the CPU runs
   its attention there and every token reads all of its weights; of a layer's experts each token reads only
   n_expert_used of n_expert, so experts leave the GPUs before layers do (llama.cpp's `--fit` order);
4. then it has the largest context on llama.cpp's grid (`engines.context_grid`);
5. then the fewest `--n-cpu-moe` (pipeline parallelism kept);
6. then the best balance across GPUs: the largest smallest headroom.

Criteria 1 and 2 are constraints (a plan that breaks them is no plan); 3 to 6 are `key`, larger is better:
`placement_key` (criterion 3) then `tie_key` (4 to 6). The planner (`planner`), the order in which the placement
search visits points (`solver`: -ngl from the top down, --n-cpu-moe from the bottom up, which is
`placement_key`'s order because fewer layers or more experts on the CPU only add bytes off the GPUs) and the
exhaustive reference (`oracle`) all rank with these functions. A change of objective is a change here; a new
placement criterion also changes the solver's walk, which relies on criterion 3 growing with -ngl and falling
with --n-cpu-moe.
"""

from __future__ import annotations

from collections.abc import Sequence

from fitplan.core.plan.space import PlacementSpace
from fitplan.core.plan.usage import DeviceUse

__all__ = [
    "Key",
    "PlacementKey",
    "TieKey",
    "key",
    "min_gpu_headroom",
    "placement_key",
    "point_key",
    "tie_key",
]

#: criterion 3: (layers on the GPUs, -weight bytes off them)
PlacementKey = tuple[int, int]
#: criteria 4 to 6: (context, -(--n-cpu-moe), smallest GPU headroom)
TieKey = tuple[int, int, int]
#: the whole objective over plans that fit: criterion 3, then 4 to 6
Key = tuple[int, int, int, int, int]


def placement_key(n_gpu_layers: int, off_gpu_bytes: int) -> PlacementKey:
    """Criterion 3 of a placement (`Placement.n_gpu_layers`, `Placement.off_gpu_bytes`); larger is better."""
    return (n_gpu_layers, -off_gpu_bytes)


def point_key(space: PlacementSpace, ngl: int, ncmoe: int, has_gpu: bool) -> PlacementKey:
    """Criterion 3 of a point of the placement space (-ngl as asked, clamped to the layers there are)."""
    act = min(ngl, space.L + 1) if has_gpu else 0
    return placement_key(act, space.off_gpu_bytes(act, ncmoe))


def tie_key(n_ctx: int, n_cpu_moe: int, min_headroom: int) -> TieKey:
    """Criteria 4 to 6, between plans of the same `placement_key`; larger is better."""
    return (n_ctx, -n_cpu_moe, min_headroom)


def key(placement: PlacementKey, ties: TieKey) -> Key:
    """The objective of a plan that fits (criteria 3 to 6); larger is better."""
    return (*placement, *ties)


def min_gpu_headroom(usage: Sequence[DeviceUse]) -> int:
    """Criterion 6's measure: the smallest headroom among the GPUs (0 without a GPU)."""
    heads = [u.headroom_bytes for u in usage if u.gpu_index is not None]
    return min(heads) if heads else 0
