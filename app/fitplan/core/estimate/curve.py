"""Every term on every device over many context lengths at once (the planner's chart and its search).

Only the KV cache, the recurrent state, the compute buffers and a draft model's share change with the context;
weights, the output buffer, the projector and the runtime reserve do not (as long as the batch sizes do not change,
which holds for every context of at least `-b` tokens). So `estimate_curve` runs `estimate()` once for the largest
context, then evaluates the context-dependent terms with numpy:

* KV / recurrent: per cache and device, the bytes of one cell times the cells llama.cpp gives that cache at each
  context (`CacheAllocation.cells_at`);
* compute: `ComputePlan.totals_array`, the vectorised form of the compute buffers;
* draft: the draft model's own curve at the target's resolved contexts.

Contexts below `-b` (where n_batch, n_ubatch and the outputs shrink with the context) go through `estimate()`
one by one. Tests and the bench check that the curve equals `estimate()` at every context.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fitplan.core import engines
from fitplan.core.base.devices import Device, Machine
from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.base.results import TERM_ORDER, Estimate, ResolvedContext, TermKind
from fitplan.core.estimate.estimator import compute_inputs, draft_settings, estimate, gpu_row_padding
from fitplan.core.memory import context as context_memory
from fitplan.core.memory.compute import ComputePlan
from fitplan.core.memory.weights import (
    DEFAULT_CPU_FEATURES,
    CpuFeatures,
    active_gpu_positions,
    active_gpus,
    place_weights,
)
from fitplan.core.model.lora import LoraAdapter
from fitplan.core.model.profile import ModelProfile

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
else:
    from fitplan.core.base.lazy import np

_KIND_INDEX = {k: i for i, k in enumerate(TERM_ORDER)}


@dataclass(frozen=True, slots=True)
class Curve:
    """Bytes per device, term and context: `bytes[device, kind, i]` for `contexts[i]`."""

    contexts: NDArray[np.int64]  # as asked (-c values; 0 = the training context)
    n_ctx: NDArray[np.int64]  # as llama.cpp resolves them (padded, times streams)
    devices: tuple[Device, ...]  # GPUs in order, then the host (as in Estimate.devices)
    bytes: NDArray[np.int64]  # shape (len(devices), len(TERM_ORDER), len(contexts))
    kinds: tuple[TermKind, ...] = TERM_ORDER

    def term(self, device: int, kind: TermKind) -> NDArray[np.int64]:
        row: NDArray[np.int64] = self.bytes[device, _KIND_INDEX[kind]]
        return row

    def used(self) -> NDArray[np.int64]:
        """Bytes per device and context, shape (devices, contexts)."""
        total: NDArray[np.int64] = self.bytes.sum(axis=1)
        return total


def _resolved_n_ctx(
    grid: context_memory.ContextGrid, n_ctx_train: int, contexts: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """n_ctx and n_ctx_seq for each requested context on the settings' grid (`context_memory.ContextGrid.padded`)."""
    n = np.where(contexts > 0, contexts, n_ctx_train).tolist()
    pairs = [grid.padded(int(x)) for x in n]
    return (
        np.fromiter((a for a, _ in pairs), dtype=np.int64, count=len(pairs)),
        np.fromiter((b for _, b in pairs), dtype=np.int64, count=len(pairs)),
    )


def estimate_curve(
    profile: ModelProfile,
    settings: LaunchSettings,
    machine: Machine,
    contexts: Sequence[int],
    *,
    mmproj: ModelProfile | None = None,
    draft: ModelProfile | None = None,
    reserve_bytes: int | None = None,
    cpu: CpuFeatures = DEFAULT_CPU_FEATURES,
    loras: Sequence[LoraAdapter] = (),
) -> Curve:
    """Every term on every device of `estimate()` for each of `contexts` (values of -c)."""
    ctxs = np.asarray(list(contexts), dtype=np.int64)
    if ctxs.ndim != 1 or ctxs.size == 0:
        raise SettingsError("estimate_curve needs at least one context")
    if (ctxs < 0).any():
        raise SettingsError("context lengths must be >= 0")
    eff = np.where(ctxs > 0, ctxs, profile.n_ctx_train)
    # Regular contexts keep n_batch = -b (causal models clamp the batch to the context below that).
    regular = eff >= settings.n_batch if profile.causal_attn else np.ones(ctxs.size, dtype=bool)
    n_dev = len(machine.gpus) + 1
    out = np.zeros((n_dev, len(TERM_ORDER), ctxs.size), dtype=np.int64)
    n_ctx_out = np.zeros(ctxs.size, dtype=np.int64)
    devices: tuple[Device, ...] = (*machine.gpus, machine.host)

    for i in np.flatnonzero(~regular):
        e = estimate(
            profile,
            dataclasses.replace(settings, n_ctx=int(ctxs[i])),
            machine,
            mmproj=mmproj,
            draft=draft,
            reserve_bytes=reserve_bytes,
            cpu=cpu,
            loras=loras,
        )
        _fill(out, int(i), e)
        n_ctx_out[i] = e.context.n_ctx
    idx = np.flatnonzero(regular)
    if idx.size == 0:
        return Curve(ctxs, n_ctx_out, devices, out)

    ref_c = int(ctxs[idx][np.argmax(eff[idx])])
    ref_settings = dataclasses.replace(settings, n_ctx=ref_c)
    ref = estimate(
        profile,
        ref_settings,
        machine,
        mmproj=mmproj,
        draft=None,
        reserve_bytes=reserve_bytes,
        cpu=cpu,
        loras=loras,
    )
    # Terms that do not depend on the context.
    for d, de in enumerate(ref.devices):
        for k in (TermKind.WEIGHTS, TermKind.OUTPUT, TermKind.MMPROJ, TermKind.RESERVE):
            out[d, _KIND_INDEX[k], idx] = de.bytes_of(k)

    n_ctx, n_ctx_seq = _resolved_n_ctx(
        context_memory.ContextGrid.of(ref.context, engines.memory_rules(settings.engine)),
        profile.n_ctx_train,
        ctxs[idx],
    )
    n_ctx_out[idx] = n_ctx
    gpus = active_gpus(settings, machine)
    padding = gpu_row_padding(settings, machine)
    dev_row = _device_rows(machine, active_gpu_positions(settings, machine))
    placement = place_weights(
        profile, ref_settings, machine, cpu=cpu, load_mtp="draft-mtp" in settings.spec_types
    )
    ref_ctx = dataclasses.replace(ref.context, n_gpu_layers=placement.n_gpu_layers)
    caches = engines.engine_context_caches(profile, ref_ctx, ref_settings)

    ctx_objs = _contexts_like(ref_ctx, n_ctx, n_ctx_seq)
    layer_dev = None if settings.no_kv_offload else placement.layer_device
    nb, ns = _add_caches(out, idx, caches, ctx_objs, dev_row, layer_dev, padding)

    cin = compute_inputs(profile, ref_settings, ref_ctx, caches, gpus, placement)
    plan = ComputePlan(
        profile, cin, placement, tuple(d.vendor for d in gpus), tuple(d.shader_64bit_indexing for d in gpus)
    )
    totals = plan.totals_array(nb, ns)
    for row_i, p in enumerate(plan.plans):
        out[dev_row[p.device], _KIND_INDEX[TermKind.COMPUTE], idx] = totals[row_i]

    if draft is not None and settings.draft is not None:
        dcurve = estimate_curve(
            draft, draft_settings(settings), machine, [int(x) for x in n_ctx], reserve_bytes=0, cpu=cpu
        )
        out[:, _KIND_INDEX[TermKind.DRAFT], idx] = dcurve.used()
    return Curve(ctxs, n_ctx_out, devices, out)


def _add_caches(
    out: NDArray[np.int64],
    idx: NDArray[np.intp],
    caches: Sequence[context_memory.CacheAllocation],
    ctx_objs: Sequence[ResolvedContext],
    dev_row: dict[int | None, int],
    layer_device: tuple[int | None, ...] | None,
    padding: tuple[tuple[int, int], ...] = (),
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Every cache's bytes at every context into `out` (the cell rules stay in context_memory), each layer's share
    on its layer's device (`layer_device` None: all on the host, -nkvo), with a GPU's padded quantized rows
    (`padding`: row padding and alignment per GPU, `gpu_row_padding`); and the KV cells of the masks, full and
    SWA, per context."""
    nb = np.zeros(idx.size, dtype=np.int64)
    ns = np.zeros(idx.size, dtype=np.int64)
    for cache in caches:
        cells = np.fromiter((cache.cells_at(c) for c in ctx_objs), dtype=np.int64, count=len(ctx_objs))
        streams = np.fromiter((cache.n_stream_at(c) for c in ctx_objs), dtype=np.int64, count=len(ctx_objs))
        extra = dict(cache.layer_extra)
        per_dev: dict[int | None, int] = {}
        padded: dict[int, list[tuple[int, int, int]]] = {}  # GPUs that pad quantized rows
        for rows in cache.layer_rows:
            il, k_row, v_row = rows
            dev = None if layer_device is None else _layer_dev(layer_device, il)
            per_dev[dev] = per_dev.get(dev, 0) + k_row + v_row + extra.get(il, 0)
            if dev is not None and dev < len(padding) and padding[dev][0]:
                padded.setdefault(dev, []).append(rows)
        for dev, row in per_dev.items():
            out[dev_row[dev], _KIND_INDEX[cache.kind], idx] += row * cells * streams
        for gi, layers in padded.items():
            rule, align = padding[gi]
            m_all: list[int] = (cells * streams).tolist()
            grown = [sum(cache.row_padding_bytes(r, rule, align, m) for r in layers) for m in m_all]
            out[dev_row[gi], _KIND_INDEX[cache.kind], idx] += np.asarray(grown, dtype=np.int64)
        if cache.kind is TermKind.KV and cache.layer_rows and not cache.name.endswith("(indexer)"):
            if cache.cell_rule is context_memory.CellRule.SWA:
                ns = np.maximum(ns, cells)
            else:
                nb = np.maximum(nb, cells)
    return nb, ns


def _contexts_like(
    ref: ResolvedContext, n_ctx: NDArray[np.int64], n_ctx_seq: NDArray[np.int64]
) -> list[ResolvedContext]:
    """`ref` with each (n_ctx, n_ctx_seq): positional construction, much cheaper than dataclasses.replace."""
    names = [f.name for f in dataclasses.fields(ResolvedContext)]
    vals = [getattr(ref, n) for n in names]
    i_ctx, i_seq = names.index("n_ctx"), names.index("n_ctx_seq")
    out: list[ResolvedContext] = []
    for a, b in zip(n_ctx.tolist(), n_ctx_seq.tolist(), strict=True):
        vals[i_ctx] = a
        vals[i_seq] = b
        out.append(ResolvedContext(*vals))
    return out


def _layer_dev(layer_device: tuple[int | None, ...], il: int) -> int | None:
    return layer_device[il] if il < len(layer_device) else layer_device[-1]


def _device_rows(machine: Machine, positions: Sequence[int]) -> dict[int | None, int]:
    """Row of the curve for each placement device index (active GPUs, at their machine positions) and the host."""
    rows: dict[int | None, int] = {None: len(machine.gpus)}
    for gi, mi in enumerate(positions):
        rows[gi] = mi
    return rows


def _fill(out: NDArray[np.int64], i: int, e: Estimate) -> None:
    for d, de in enumerate(e.devices):
        for k in TERM_ORDER:
            out[d, _KIND_INDEX[k], i] = de.bytes_of(k)
