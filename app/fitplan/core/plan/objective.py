"""The planner's objective: which of two plans is better. Its one written home, and the user's choice (`Goal`).

Two criteria are constraints (a plan that breaks them is no plan):

1. it fits: every device within its capacity minus the margins (`verdict`, with the `MarginPolicy` of `usage`:
   1024 MiB per GPU, like llama.cpp's `--fit-target`, and 1024 MiB of host RAM, by default);
2. it meets the floors: its context is at least the pinned `-c`, else `--min-ctx`, else 4096 tokens per sequence
   (llama.cpp's `--fit-ctx`), never above the training length; and, when `Objective.min_gen_tps` is set, its
   generation speed (a `SpeedOf`, the speed model's, given to the planner) is at least that many tokens/s.

Then plans are ranked by `key`, larger is better, each criterion only breaking the ties of the ones before it. With
`Goal.PLACEMENT` (fastest placement first, the default):

3. it keeps the fewest weight bytes off the GPUs, counted layer first: the most layers on the GPUs (`-ngl`), then
   the fewest expert bytes on the CPU (`--n-cpu-moe`; `PlacementSpace.off_gpu_bytes`). A layer on the CPU runs
   its attention there and every token reads all of its weights; of a layer's experts each token reads only
   n_expert_used of n_expert, so experts leave the GPUs before layers do (llama.cpp's `--fit` order). Leaving
   the GPUs out (`-dev none`) keeps every weight off them, like `-ngl 0`. Finer than whole layers
   (`space.Finer`): a dense model's partial layer counts as a layer on the GPU with its FFN bytes on the host off
   them (so it ranks between the whole layer and none of it); `-nkvo` counts its cache's bytes off the GPUs (at
   the context floor, or at the context itself when the context comes first), and as many whole layers fewer as
   that cache is worth (`PlacementSpace.key_layers`: a layer on the CPU costs each token its weights and its share
   of the cache, -nkvo the whole cache), so it wins only where it costs less than the layers it keeps on the GPU;
4. then it has the largest context on llama.cpp's grid (`engines.context_grid`);
5. then the fewest `--n-cpu-moe` (pipeline parallelism kept);
6. then the best balance across GPUs: the largest smallest headroom.

With `Goal.CONTEXT` (longest context first) criterion 4 comes first: the largest context, then 3, 5 and 6.

`placement_key` is criterion 3, `tie_key` 4 to 6, and `key` orders them by the goal. The planner (`planner`), the
placement search (`solver`: -ngl from the top down, --n-cpu-moe from the bottom up, which is `placement_key`'s order
because fewer layers or more experts on the CPU only add bytes off the GPUs; for `Goal.CONTEXT` the largest context
at which some placement fits is bisected first, memory only growing with the context), the exhaustive reference
(`oracle`) and "what would change it" (`alternatives`) all rank with these functions. A change of objective is a
change here; a new placement criterion also changes the solver's walk, which relies on criterion 3 growing with -ngl
and falling with --n-cpu-moe.

The speed floor assumes what the speed model gives: at a fixed context a placement with a larger `placement_key`
is not slower, and at a fixed placement a larger context is not faster. So with `Goal.PLACEMENT` the floor is met
at the best placement or nowhere (its context is bisected down to the largest that keeps the floor), and with
`Goal.CONTEXT` the largest context whose best placement keeps the floor is bisected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # annotations only: the window reads the goals before the model tables load
    from fitplan.core.base.devices import Machine
    from fitplan.core.model.profile import ModelProfile
    from fitplan.core.plan.planner import Plan
    from fitplan.core.plan.space import Finer, PlacementSpace
    from fitplan.core.plan.usage import DeviceUse

__all__ = [
    "GOAL_WORDS",
    "Goal",
    "Key",
    "Objective",
    "PlacementKey",
    "SpeedOf",
    "TieKey",
    "key",
    "min_gpu_headroom",
    "model_speed_of",
    "placement_key",
    "point_key",
    "tie_key",
]


class Goal(StrEnum):
    """What the user wants first."""

    PLACEMENT = "placement"  # the fastest placement (the most weights on the GPUs), then the longest context
    CONTEXT = "context"  # the longest context, then the fastest placement for it


#: each goal in words, where results say what they were planned for
GOAL_WORDS = {
    Goal.PLACEMENT: "fastest placement first (the most weights on the GPUs), then the longest context",
    Goal.CONTEXT: "longest context first, then the fastest placement for it",
}


class SpeedOf(Protocol):
    """Generation tokens/s of a plan (the speed model's, bound to the model and machine by the caller)."""

    def __call__(self, plan: Plan, /) -> float: ...


def model_speed_of(profile: ModelProfile, machine: Machine, host_bandwidth: float | None = None) -> SpeedOf:
    """The speed model's `SpeedOf` for a model on a machine: generation tokens/s with the KV cache filled to the
    plan's context (`fitplan.core.speed.plan_speed`, `generation_full`), the speed a floor must keep over the
    whole context. `host_bandwidth` in bytes/s (None: detected or the platform's stated default)."""
    from fitplan.core.speed import plan_speed  # the speed tables load only when a floor is asked for

    def speed_of(plan: Plan, /) -> float:
        return plan_speed(profile, machine, plan.settings, host_bandwidth=host_bandwidth).generation_full.tps

    return speed_of


@dataclass(frozen=True, slots=True)
class Objective:
    """The user's objective: a goal and the floors (the context floor is the pins' `min_ctx`)."""

    goal: Goal = Goal.PLACEMENT
    min_gen_tps: float | None = None  # generation tokens/s at least (needs a `SpeedOf`)

    def describe(self) -> str:
        floor = f"; at least {self.min_gen_tps:g} t/s generation" if self.min_gen_tps is not None else ""
        return GOAL_WORDS[self.goal] + floor


#: criterion 3: (layers on the GPUs, -weight bytes off them)
PlacementKey = tuple[int, int]
#: criteria 4 to 6: (context, -(--n-cpu-moe), smallest GPU headroom)
TieKey = tuple[int, int, int]
#: the whole objective over plans that fit: criteria 3 to 6 in the goal's order
Key = tuple[int, int, int, int, int]


def placement_key(n_gpu_layers: int, off_gpu_bytes: int) -> PlacementKey:
    """Criterion 3 of a placement (`Placement.n_gpu_layers`, `Placement.off_gpu_bytes`); larger is better."""
    return (n_gpu_layers, -off_gpu_bytes)


def point_key(
    space: PlacementSpace, ngl: int, ncmoe: int, has_gpu: bool, finer: Finer | None = None
) -> PlacementKey:
    """Criterion 3 of a point of the placement space (-ngl as asked, clamped to the layers there are; `finer`: its
    partial layer and -nkvo, counted by `PlacementSpace.key_layers` and `off_gpu_bytes`)."""
    act = min(ngl, space.L + 1) if has_gpu else 0
    if finer is None or not has_gpu:
        return placement_key(act, space.off_gpu_bytes(act, ncmoe))
    return placement_key(space.key_layers(act, finer), space.off_gpu_bytes(act, ncmoe, finer))


def tie_key(n_ctx: int, n_cpu_moe: int, min_headroom: int) -> TieKey:
    """Criteria 4 to 6, between plans of the same `placement_key`; larger is better."""
    return (n_ctx, -n_cpu_moe, min_headroom)


def key(placement: PlacementKey, ties: TieKey, goal: Goal) -> Key:
    """The objective of a plan that fits (criteria 3 to 6, in the goal's order); larger is better."""
    if goal is Goal.CONTEXT:
        return (ties[0], *placement, ties[1], ties[2])
    return (*placement, *ties)


def min_gpu_headroom(usage: Sequence[DeviceUse]) -> int:
    """Criterion 6's measure: the smallest headroom among the GPUs (0 without a GPU)."""
    heads = [u.headroom_bytes for u in usage if u.gpu_index is not None]
    return min(heads) if heads else 0
