"""A device's whole layer phase replayed through the graph allocator, layer after layer, for a buffer made of
chunks (Vulkan's 1 GiB suballocation blocks, `ChunkedFit`).

Where a layer's tensors go depends on the free blocks the layers before it left: the block that carries the
residual from one layer to the next lands where the previous layer's FFN output landed, and the next layer's
query parts go around it. Replaying one layer above a fixed base misses that (DeepSeek-V3 over two Vulkan-shaped
stand-ins, `-ts 3,1 -ub 2048`: the later layers' Q tensors spread over four chunks, 976 + 704 + 632 + 576 MiB on
the first device, where one layer's replay gives three). This module gives each layer's sequence of allocations
and frees in graph order (llama.cpp 515e85511: src/models/deepseek2.cpp, the layer loop from line 466;
src/llama-graph.cpp `build_moe_ffn`, line 2044, and `build_ffn`; an op ggml-alloc.c `ggml_op_can_inplace` lets
reuse its parent's block allocates nothing, `ggml_gallocr_allocate_node` line 623, `ggml_gallocr_free_node` line
691) and runs them over the chunks (`ggml_dyn_tallocr_alloc`, line 202), stopping a run of same-shaped layers once
a layer leaves the allocator as it found it. Checked against the allocator's list of every allocation and free
(DeepSeek-V3 and DeepSeek-V2-Lite on the Vulkan-shaped stand-in, one and two devices, `-ub 2048` and 4096): the
chunks' highest ends to the byte, over chunks and with the chunk limit lifted.
"""

from __future__ import annotations

from functools import lru_cache

from fitplan.core.memory.compute.allocator import F32, I32, ChunkedFit, ReplayOp
from fitplan.core.memory.compute.attention import absorbed_mla_ops
from fitplan.core.model.profile import LayerProfile, MlaParams, ModelProfile

#: The residual a layer reads (freed once its attention output is added) and the one it leaves for the next.
LAYER_IN = "layer input"
LAYER_OUT = "layer output"
#: A chunk size no buffer reaches: the replay in one buffer.
ONE_BUFFER = 1 << 62
#: A run of layers with the same sequence: (ops, how many layers).
LayerRun = tuple[tuple[ReplayOp, ...], int]


def deepseek2_runs(
    profile: ModelProfile, layers: list[int], mla: MlaParams, n_tok: int, n_out: int
) -> tuple[LayerRun, ...]:
    """The runs of `deepseek2_layer_ops` over `layers` (`n_out`: the output rows of the model's last layer)."""
    biased = {t.layer for t in profile.tensors if t.name.endswith(".exp_probs_b.bias")}
    merged = {t.layer for t in profile.tensors if ".ffn_gate_up_exps." in t.name}
    last = profile.n_layer - 1
    seqs = [
        deepseek2_layer_ops(
            profile, profile.layers[il], mla, n_tok, il in biased, il in merged, n_out if il == last else 0
        )
        for il in layers
    ]
    return layer_runs(seqs)


def deepseek2_layer_ops(
    profile: ModelProfile,
    lp: LayerProfile,
    mla: MlaParams,
    n_tok: int,
    biased: bool = False,
    merged: bool = False,
    rows: int = 0,
) -> tuple[ReplayOp, ...]:
    """One absorbed-MLA layer with flash attention, in graph order: the attention norm, the attention
    (`absorbed_mla_ops`; the norm is freed once the compressed KV is made from it), the output projection (the
    residual added in place: `ffn_inp`), the FFN norm and the FFN (dense or routed experts with the shared
    expert), the layer's output left live (the allocator's trace of DeepSeek-V3 on the Vulkan-shaped stand-in,
    `-ub 2048`: `attn_norm` freed after `kv_cmpr_pe`, `l_out` of the layer before freed after `ffn_inp`).
    `biased`: the layer has the router's selection bias (`exp_probs_b`); `merged`: its experts' gate and up
    are one tensor (`ffn_gate_up_exps`: one output, gate and up views of it). `rows` > 0: the model's last
    layer, which gathers that many output rows of its attention's output and of the residual before its FFN
    (deepseek2.cpp line 637, `inp_out_ids`, built whatever the output count; added in place), and runs its FFN
    on them (llama-server's reserve: one row per sequence; DeepSeek-V3 with `--server-defaults`, `-ts 3,1`:
    Vulkan1's chunks 2564.09 MiB, 2088.09 in one buffer)."""
    f = F32 * n_tok
    block = f * profile.n_embd
    ops: list[ReplayOp] = [("attn_norm", block)]
    for op in absorbed_mla_ops(profile.n_embd, lp.n_head, lp.n_embd_head_v, mla, n_tok, fa=True):
        ops.append(op)
        if op[0] == "kv_cmpr_pe" and op[1]:
            ops.append(("attn_norm", 0))
    ffn_inp, n = "wo", n_tok
    if rows:
        out = F32 * rows * profile.n_embd
        ops += [("cont", 0), ("rows", out), ("wo", 0), ("residual rows", out), (LAYER_IN, 0)]
        ops += [("residual rows", 0), ("ffn_norm", out)]
        ffn_inp, n = "rows", rows
    else:
        ops += [("cont", 0), (LAYER_IN, 0), ("ffn_norm", block)]
    moe = profile.moe
    if lp.is_moe and moe is not None:
        ops += _moe_ops(profile, lp, n, biased, merged)
    else:
        glu = F32 * n * lp.n_ff
        ops += [("gate", glu), ("up", glu), ("ffn_norm", 0), ("glu", glu), ("gate", 0), ("up", 0)]
        ops += [(LAYER_OUT, F32 * n * profile.n_embd), ("glu", 0)]
    ops.append((ffn_inp, 0))
    return tuple(ops)


def _moe_ops(
    profile: ModelProfile, lp: LayerProfile, n_tok: int, biased: bool, merged: bool
) -> list[ReplayOp]:
    """`build_moe_ffn` for deepseek2: the router (`_router_ops`), the experts' gate, up, GLU and down outputs, their
    weighted sum (the first add of the experts' views allocates, the others add in place), then the shared
    expert added in place (`ffn_out`)."""
    moe = profile.moe
    assert moe is not None
    f = F32 * n_tok
    block = f * profile.n_embd
    used = lp.n_expert_used or moe.n_expert_used
    ops, weights = _router_ops(profile, lp, n_tok, biased)
    glu = f * moe.n_ff_exp * used
    if merged:
        ops += [("moe_gate_up", 2 * glu), ("moe_glu", glu), ("moe_gate_up", 0)]
    else:
        ops += [("moe_gate", glu), ("moe_up", glu), ("moe_glu", glu), ("moe_gate", 0), ("moe_up", 0)]
    ops += [("moe_down", f * profile.n_embd * used), ("moe_glu", 0), ("argsort", 0), (weights, 0)]
    ops += [(LAYER_OUT, block), ("moe_down", 0)]
    shared = f * (moe.n_ff_shexp or moe.n_ff_exp * moe.n_expert_shared)
    if shared:
        ops += [("sh_gate", shared), ("sh_up", shared), ("ffn_norm", 0), ("sh_glu", shared)]
        ops += [("sh_gate", 0), ("sh_up", 0), ("sh_out", block), ("sh_glu", 0), ("sh_out", 0)]
    else:
        ops.append(("ffn_norm", 0))
    return ops


def _router_ops(
    profile: ModelProfile, lp: LayerProfile, n_tok: int, biased: bool
) -> tuple[list[ReplayOp], str]:
    """The router of `build_moe_ffn`: the logits (the gating function in place), the selection bias
    (`exp_probs_b`), DeepSeek-V3's group-limited selection (the top two per group, their sums, the top groups,
    the chosen groups' rows set into a filled copy), the top experts' argsort, and the weights gathered,
    normalised and scaled. The name of the weights the experts' outputs are multiplied by comes with it."""
    moe = profile.moe
    assert moe is not None
    f, n_exp = F32 * n_tok, moe.n_expert
    used = lp.n_expert_used or moe.n_expert_used
    ops: list[ReplayOp] = [("logits", f * n_exp)]
    sel = "logits"
    if biased:
        ops.append(("biased", f * n_exp))
        sel = "biased"
    groups = moe.n_expert_groups
    if groups > 1:
        per_group = n_exp // groups
        ops += [("g_sort", I32 * n_tok * n_exp), ("g_top2", f * 2 * groups), ("g_sort", 0)]
        ops += [("g_sum", f * groups), ("g_top2", 0), ("g_idx", I32 * n_tok * groups), ("g_sum", 0)]
        ops += [("g_rows", f * per_group * moe.n_group_used), ("masked", f * n_exp), (sel, 0)]
        ops += [("g_rows", 0), ("g_idx", 0)]
        sel = "masked"
    ops.append(("argsort", I32 * n_tok * n_exp))
    if sel != "logits":  # the probabilities (the logits' block) are read again for the weights
        ops.append((sel, 0))
    ops += [("weights", f * used), ("logits", 0)]
    weights = "weights"
    if moe.weights_norm:
        ops += [("w_sum", f), ("w_norm", f * used), ("weights", 0), ("w_sum", 0)]
        weights = "w_norm"
    if moe.weights_scale not in (0.0, 1.0):
        ops += [("w_scaled", f * used), (weights, 0)]
        weights = "w_scaled"
    return ops, weights


def layer_runs(ops: list[tuple[ReplayOp, ...]]) -> tuple[LayerRun, ...]:
    """Consecutive layers with the same sequence, as runs."""
    runs: list[LayerRun] = []
    for seq in ops:
        if runs and runs[-1][0] == seq:
            runs[-1] = (seq, runs[-1][1] + 1)
        else:
            runs.append((seq, 1))
    return tuple(runs)


def replay_layers(
    size: int,
    prelude: tuple[tuple[str, int], ...],
    runs: tuple[LayerRun, ...],
    tail: tuple[ReplayOp, ...],
) -> tuple[int, int]:
    """The buffer `runs` of layers need over chunks of at most `size` bytes (the sum of the chunks' highest
    ends) after the layers and after `tail` (the output phase), with `prelude` live in the first chunk from the
    bottom up ("" a free block; a segment named like a tensor of the first layer is that tensor, which the layer
    then does not allocate again). A run stops replaying once a layer leaves the chunks, the free blocks and the
    live tensors as an earlier layer of the run left them: the layers after it repeat that cycle."""
    layers, total, _ = traced_replay(size, prelude, runs, tail, -1)
    return layers, total


@lru_cache(maxsize=2048)
def traced_replay(
    size: int,
    prelude: tuple[tuple[str, int], ...],
    runs: tuple[LayerRun, ...],
    tail: tuple[ReplayOp, ...],
    vary: int,
) -> tuple[int, int, tuple[int, ...]]:
    """`replay_layers` with where each allocation went (chunk, offset), in order; offsets in the first chunk
    above prelude segment `vary` (-1: none, and no placements kept) are taken less its size, so that two
    replays whose segment `vary` differs in size (the copied mask) give the same placements when the allocator
    decides the same at every step (`replay_curve`)."""
    start = sum(n for _, n in prelude[:vary]) if vary >= 0 else -1
    shift = prelude[vary][1] if vary >= 0 else 0
    sim = ChunkedFit.from_layout(size, prelude)
    placed = {name for name, _ in prelude if name}
    where: list[int] = []

    def alloc(name: str, nbytes: int) -> None:
        sim.alloc(name, nbytes)
        if vary >= 0:  # kept only where a curve compares them
            c, off, _ = sim.live[name]
            where.extend((c, off - shift if c == 0 and off > start else off))

    for seq, count in runs:
        seen: dict[object, int] = {}
        i = 0
        while i < count:
            key = sim.state()
            if key in seen:
                period = i - seen[key]
                i += (count - i) // period * period
                seen.clear()
                if i >= count:
                    break
            seen[key] = i
            for name, nbytes in seq:
                if nbytes and name in placed:
                    placed.discard(name)
                elif nbytes:
                    alloc(name, nbytes)
                elif name in sim.live:
                    sim.release(name)
            if LAYER_OUT in sim.live:
                sim.live[LAYER_IN] = sim.live.pop(LAYER_OUT)
            i += 1
    layers = sim.total
    for name, nbytes in tail:
        if nbytes:
            alloc(name, nbytes)
        elif name in sim.live:
            sim.release(name)
    return layers, sim.total, tuple(where)


def replay_curve(
    size: int,
    preludes: list[tuple[tuple[str, int], ...]],
    runs: tuple[LayerRun, ...],
    tail: tuple[ReplayOp, ...],
) -> list[int]:
    """`replay_layers`' total at each of many preludes that differ in one segment's size at most (the copied
    mask over a context curve), with few replays. Only the first chunk's free end depends on that size, and the
    allocator's choice at each step is monotone in it, so two replays that place every tensor alike (less the
    segment's size, `traced_replay`) place them alike at every size between, where the total is the lower
    one's plus the difference in size; elsewhere the sizes are split in two."""
    if not preludes:
        return []
    first = preludes[0]
    vary = [k for k in range(len(first)) if any(p[k][1] != first[k][1] for p in preludes)]
    if len(vary) > 1:
        return [replay_layers(size, p, runs, tail)[1] for p in preludes]
    k = vary[0] if vary else -1
    by_size = {p[k][1] if k >= 0 else 0: p for p in preludes}
    sizes = sorted(by_size)
    totals: dict[int, int] = {}

    def solve(lo: int, hi: int) -> None:
        _, t_lo, w_lo = traced_replay(size, by_size[sizes[lo]], runs, tail, k)
        _, t_hi, w_hi = traced_replay(size, by_size[sizes[hi]], runs, tail, k)
        if w_lo == w_hi:
            for j in range(lo, hi + 1):
                totals[sizes[j]] = t_lo + sizes[j] - sizes[lo]
        elif hi - lo <= 1:
            totals[sizes[lo]], totals[sizes[hi]] = t_lo, t_hi
        else:
            mid = (lo + hi) // 2
            solve(lo, mid)
            solve(mid, hi)

    solve(0, len(sizes) - 1)
    return [totals[p[k][1] if k >= 0 else 0] for p in preludes]
