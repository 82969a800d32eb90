"""Placements finer than whole layers, tried after the whole-layer search (`solver.Solver.search`) and only where it
leaves weights on the CPU or nothing fits, so that a plan whose layers all fit costs no extra estimate.

Two options (`space.Finer`), each measured against llama.cpp (tests/fixtures/llamacpp/finer):

* the partial layer of a dense model: one layer more than the best whole-layer -ngl whose GPUs fit, with the FFN
  tensors of that layer on the host by common/fit.cpp's patterns (ffn_down first, then ffn_gate, then the whole FFN;
  `space.FFN_FRACTION_PATTERNS`; at the targeted commit --fit itself writes them for a MoE model's first partial
  layer only, and fills a dense model with whole layers): the first of the three whose GPUs fit is the best (each
  moves more off them);
* `-nkvo`: every layer the pins allow on the GPUs, the KV cache in host memory.

Both need llama.cpp itself as the engine and one GPU, a pinned `-ts`, or two GPUs with a free split (-nkvo: one
GPU or two of ggml-cuda's, `nkvo_devices`); then each
finer point's split is balanced with its finer option in place (`solver.Solver.check`), the partial layer's from the
whole layers' split with the layer added to each GPU in turn. The partial layer also needs a free `-ngl`, no `-ot` of
the user's and no "all weights on the GPU" (-nkvo keeps every weight where it was), -nkvo no `-nkvo`/`-kvo` of the
user's. The candidates are ranked with the whole-layer ones by `objective.point_key`, which counts -nkvo by the
cache's bytes in host memory (`Finer.kv_bytes`) at the context the search runs at: the floor when the placement
comes first, the context found when the context does (a long context read from host memory for every token).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fitplan.core.base.devices import Device
from fitplan.core.base.launch_settings import Engine
from fitplan.core.base.results import TermKind
from fitplan.core.memory.weights import CUDA_VENDORS
from fitplan.core.plan.objective import point_key
from fitplan.core.plan.solver import Check, Point, Solver
from fitplan.core.plan.space import FFN_FRACTION_PATTERNS, Finer, compositions

if TYPE_CHECKING:
    from fitplan.core.plan.planner import Problem

__all__ = ["finer_points", "finer_search", "nkvo_allowed", "nkvo_devices", "nkvo_finer", "partial_allowed"]


def _common(pb: Problem, solver: Solver) -> bool:
    # a free split over two GPUs, not more: over three the whole-layer split the partial layer starts from is
    # balanced less well (the exhaustive search finds partial layers further up that the planner does not try)
    two = not solver.split_free or len(solver.gpus) == 2
    return pb.has_gpu and two and pb.base.engine is Engine.LLAMA_CPP


def partial_allowed(pb: Problem, solver: Solver) -> bool:
    """Whether the plan may put part of a dense layer's FFN on the host (-ngl free)."""
    lo, hi = pb.ngl_choices
    return (
        _common(pb, solver)
        and lo < hi
        and not pb.space.is_moe
        and not pb.base.tensor_overrides
        and not pb.pins.all_weights_on_gpu
    )


def nkvo_allowed(pb: Problem, solver: Solver) -> bool:
    """Whether the plan may keep the KV cache in host memory (-nkvo), on the GPUs `nkvo_devices` allows."""
    return (
        nkvo_devices(solver.gpus)
        and _common(pb, solver)
        and pb.pins.no_kv_offload is None
        and not pb.base.no_kv_offload
    )


def nkvo_devices(gpus: Sequence[Device]) -> bool:
    """Whether -nkvo may be planned on `gpus`: one GPU, or two of ggml-cuda's (`CUDA_VENDORS`). Over two the
    scheduler runs a layer's flash attention on the GPU that holds its Q (ggml-backend.cpp
    `ggml_backend_sched_backend_id_from_cur` skips FLASH_ATTN_EXT when it places ops by their weights), so that GPU
    copies in the layer's K and V views and its mask from host memory; the estimate counts those copies
    (`HostCacheAttention`), recorded on two CUDA stand-ins (grid `finer`: every two-GPU -nkvo case within 2.8%).
    Not recorded over more GPUs or on another backend's devices: the plan does not choose -nkvo there, and a
    user's -nkvo is estimated as given."""
    return len(gpus) == 1 or (len(gpus) == 2 and all(d.vendor in CUDA_VENDORS for d in gpus))


def nkvo_finer(solver: Solver, ngl: int, ncmoe: int, n_ctx: int) -> Finer:
    """-nkvo at (ngl, ncmoe), with the host's KV and recurrent-state bytes at `n_ctx` (the objective's count: the
    context floor when the placement comes first, the context itself when the context does)."""
    probe = Finer(no_kv_offload=True)
    est = solver.ev(solver.settings(Point(ngl, ncmoe, None, probe), n_ctx))[0]
    host = est.devices[-1]
    kv = host.bytes_of(TermKind.KV) + host.bytes_of(TermKind.RECURRENT)
    return dataclasses.replace(probe, kv_bytes=kv)


def _check(solver: Solver, ngl: int, ncmoe: int, finer: Finer, n_ctx: int) -> Check:
    return solver.check(ngl, ncmoe, n_ctx, finer)


def _partial(pb: Problem, solver: Solver, found: list[Check], last: Check, n_ctx: int) -> Check | None:
    """The best partial layer: one layer above the best whole -ngl whose GPUs fit, the least of its FFN moved."""
    if found:
        whole: Point | None = found[0].point
        ngl = found[0].point.ngl + 1
    elif last.gpus_fit:
        whole = last.point  # the GPUs fit there, the host is short: a layer more on the GPUs may relieve it
        ngl = last.point.ngl + 1
    elif solver.split_free:
        # no whole -ngl's split was found to fit the GPUs (the balancing is not exhaustive): the partial layer with
        # every other layer the pins allow, from the split the whole layers' search balanced there
        whole, ngl = None, pb.ngl_choices[1]
    else:
        return None
    if ngl > pb.ngl_choices[1] or not pb.space.partial_ok(ngl):
        return None
    for frac in sorted(FFN_FRACTION_PATTERNS):
        split = whole.split if whole is not None else None
        c = _partial_at(solver, ngl, pb.ncmoe_choices[0], split, Finer(ffn_cpu=frac), n_ctx)
        if c.gpus_fit:
            return c  # the next fraction moves more to the host: no better
    return None


def _partial_at(
    solver: Solver, ngl: int, ncmoe: int, whole: tuple[int, ...] | None, finer: Finer, n_ctx: int
) -> Check:
    """The partial layer at `ngl` over the whole layers' split `whole` (free split: the partial layer added to
    each GPU in turn, first GPU first, where it is the first offloaded layer; the split balanced when none fits)."""
    if whole is not None and solver.split_free:
        for i in range(len(whole)):
            split = tuple(k + (j == i) for j, k in enumerate(whole))
            p = Point(ngl, ncmoe, split, finer)
            usage = solver.usage(p, n_ctx)
            if all(u.fits for u in usage if u.gpu_index is not None):
                return Check(p, True, all(u.fits for u in usage if u.gpu_index is None))
    return solver.check(ngl, ncmoe, n_ctx, finer)


def finer_search(
    pb: Problem, solver: Solver, found: list[Check], last: Check, n_ctx: int
) -> tuple[list[Check], Check]:
    """The whole-layer search's answer (`found`, `last`) with the finer options added where they may do better:
    the feasible points best by `objective.point_key`, ties included, and the point to report when none is."""
    top = point_key(pb.space, pb.ngl_choices[1], pb.ncmoe_choices[0], pb.has_gpu)
    best = max((_key(pb, c.point) for c in found), default=None)
    if best is not None and best >= top:
        return found, last  # every layer the pins allow is on the GPUs
    cands = list(found)
    if partial_allowed(pb, solver):
        c = _partial(pb, solver, found, last, n_ctx)
        if c is not None and c.fits:
            cands.append(c)
    # -nkvo counts at least one layer fewer (a cache of any size): it cannot beat a plan that keeps every layer on
    # the GPUs (only experts off them), so it is not estimated there
    if nkvo_allowed(pb, solver) and (best is None or best[0] < min(pb.ngl_choices[1], pb.space.L + 1)):
        ngl, ncmoe = pb.ngl_choices[1], pb.ncmoe_choices[0]
        c = _check(solver, ngl, ncmoe, nkvo_finer(solver, ngl, ncmoe, n_ctx), n_ctx)
        if c.fits:
            cands.append(c)
    if not cands:
        return [], last
    k = max(_key(pb, c.point) for c in cands)
    return [c for c in cands if _key(pb, c.point) == k], last


def _key(pb: Problem, p: Point) -> tuple[int, int]:
    return point_key(pb.space, p.ngl, p.ncmoe, pb.has_gpu, p.finer)


def finer_points(pb: Problem, solver: Solver) -> list[Point]:
    """Every finer point of the space, for the exhaustive search (`oracle`): each -ngl's partial layer at every
    fraction, and -nkvo with every layer the pins allow on the GPUs; with a free split over several GPUs, each at
    every split of its offloaded layers."""
    out: list[Point] = []
    lo_g, hi_g = pb.ngl_choices
    ncmoe = pb.ncmoe_choices[0]

    def splits(ngl: int) -> list[tuple[int, ...] | None]:
        if not solver.split_free:
            return [None]
        return list(compositions(min(ngl, pb.space.L + 1), len(solver.gpus)))

    if partial_allowed(pb, solver):
        for ngl in range(hi_g, lo_g - 1, -1):
            if pb.space.partial_ok(ngl):
                out += [
                    Point(ngl, ncmoe, split, Finer(ffn_cpu=f))
                    for f in FFN_FRACTION_PATTERNS
                    for split in splits(ngl)
                ]
    if nkvo_allowed(pb, solver):
        f = nkvo_finer(solver, hi_g, ncmoe, pb.need_ctx)
        out += [Point(hi_g, ncmoe, split, f) for split in splits(hi_g)]
    return out
