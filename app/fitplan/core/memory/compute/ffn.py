"""The feed-forward network's transient and what stays below the logits: gate, up, the GLU output and down,
the experts' outputs and their sum, and the holes the FFN norm leaves (`llm_graph_context::build_ffn`,
`build_moe_ffn` in src/llama-graph.cpp)."""

from __future__ import annotations

from fitplan.core.memory.compute.allocator import F32, BestFit, ReplayOp, in_hole
from fitplan.core.memory.compute.shapes import attn_layers, layer_shapes
from fitplan.core.model.profile import ModelProfile, MoeParams

#: Activation blocks `[n_embd, n_tok]` on the backend that runs the first layer: the embeddings input and the
#: token-embedding rows (kept allocated through the graph), the residual stream (the FFN input) and the two-block
#: hole the FFN norm output leaves (FFN_HOLE_BLOCKS); the CPU dry runs show exactly this for dense and MoE models.
RESIDUAL_BLOCKS = 5
#: Architectures without mixed-batch inputs (`GraphTraits.no_mixed_batch`, src/llama-arch.cpp
#: `llm_arch_supports_mixed_batch`): the embeddings input, the FFN input and the one-block hole the freed
#: token-embedding rows leave, into which the FFN norm output goes (the allocator's peak on the cogvlm smoke model).
NO_MIXED_BATCH_BLOCKS = 3


#: Blocks of `[n_embd, n_tok]` freed just before the FFN (the FFN norm output and its neighbour) that form one hole:
#: an FFN intermediate no larger than this is placed there instead of at the end of the buffer.
FFN_HOLE_BLOCKS = 2


def residual_blocks(profile: ModelProfile) -> int:
    """`[n_embd, n_tok]` blocks in the layer phase of the backend that runs the first layer."""
    return NO_MIXED_BATCH_BLOCKS if profile.traits.graph.no_mixed_batch else RESIDUAL_BLOCKS


def moe_split_below_logits(profile: ModelProfile, il: int, n_tok: int) -> int:
    """Bytes that stay under the logits on a later GPU whose last layer is a MoE with a shared expert (read from
    the allocator's trace of deepseek-v2-lite split over two devices).

    The shared expert reads the FFN norm output after the routed experts, so the FFN input and the norm output
    stay live while the sum of the routed experts is allocated: no freed block below fits it, and it lands right
    above the experts' down outputs `[n_embd, n_used, n_tok]`, which took the space of gate and up (the rest of
    that space joins the free end of the buffer once the GLU output above it is freed). The residual, the output
    norm and the logits then follow in that sum's place. Under them: the two blocks, the router's probabilities
    and top-k indices `[n_expert, n_tok]` and weights `[n_used, n_tok]`, and the down outputs. Without a shared expert (gpt-oss, Qwen3-MoE) the
    norm output is freed after up and the sum takes its place; llama4's router-weighted input leaves a block-sized
    hole too.
    """
    moe = profile.moe
    lp = profile.layers[il]
    if not (lp.is_moe and moe is not None) or profile.traits.graph.weight_before_ffn:
        return 0
    if il not in layer_shapes(profile).shexp:
        return 0
    used = lp.n_expert_used or moe.n_expert_used
    up = F32 * n_tok * used * (moe.n_ff_exp or lp.n_ff)
    down = F32 * n_tok * used * profile.n_embd
    if down > 2 * up:
        # the down outputs go above the GLU output and gate + up leave a hole the sum can take (Qwen3-Next);
        # where the logits then go is not modelled (granite-4.0-h-tiny: above the down outputs all the same)
        return 0
    router = 2 * F32 * n_tok * moe.n_expert + F32 * n_tok * used
    return 2 * F32 * n_tok * profile.n_embd + router + down


def moe_down_outputs(profile: ModelProfile, il: int, n_tok: int) -> int:
    """The routed experts' down outputs `[n_embd, n_used, n_tok]` of layer `il` where the sum of the experts
    lands above them (`moe_split_below_logits` non-zero), else 0."""
    moe = profile.moe
    if not moe_split_below_logits(profile, il, n_tok) or moe is None:
        return 0
    used = profile.layers[il].n_expert_used or moe.n_expert_used
    return F32 * n_tok * used * profile.n_embd


def weighted_input_below_logits(profile: ModelProfile, il: int, n_tok: int) -> int:
    """Bytes under the logits besides the output norm's block on a GPU whose layers keep their outputs in the lowest
    blocks (`PlanBuilder._after_host_ffn`), when the last layer is a MoE that weights its input before the experts
    (llama4; read from the allocator's trace of Llama-4-Scout at `-ngl 24 --no-op-offload` on the CUDA-shaped
    stand-in).

    The FFN input and the FFN norm's output take the two lowest blocks, the router's logits, probabilities and
    top-k indices `[n_expert, n_tok]` follow, and the repeated, weighted input above them gives its place to the
    experts' down outputs `[n_embd, n_used, n_tok]`; their sum (a copy, with one expert used) goes above those,
    and the residual, the output norm and the logits in its place (ffn_inp-47 at 0, the norm at 10 MiB, the
    router's 96 KiB, ffn_moe_down-47 at 20.09 MiB, ffn_moe_out-47 at 30.09 MiB, the logits at 40.09 MiB)."""
    moe = profile.moe
    lp = profile.layers[il]
    if not (lp.is_moe and moe is not None and profile.traits.graph.weight_before_ffn):
        return 0
    used = lp.n_expert_used or moe.n_expert_used
    router = 3 * F32 * n_tok * moe.n_expert
    return 2 * F32 * n_tok * profile.n_embd + router + F32 * n_tok * used * profile.n_embd


def routed_sum_inputs(profile: ModelProfile, il: int, n_tok: int) -> int:
    """Bytes under the logits on a GPU that holds the output layer and no block (`-ngl 1`), when the last block is a
    MoE without a shared expert (read from the allocator's traces of qwen3-30b-a3b and gpt-oss-20b).

    The ops after the experts' down projection carry no weights, so the scheduler runs them with the output
    layer: the down outputs `[n_embd, n_used, n_tok]`, the router weights `[n_used, n_tok]` and the FFN input are
    copied in, and the sum of the experts (then the residual, the output norm and the logits in its place) lands
    above them. A shared expert's matrix keeps the sum where the experts ran.
    """
    moe = profile.moe
    lp = profile.layers[il]
    if not (lp.is_moe and moe is not None) or il in layer_shapes(profile).shexp:
        return 0
    used = lp.n_expert_used or moe.n_expert_used
    return F32 * n_tok * (used * profile.n_embd + used + profile.n_embd)


def ffn_transient(
    profile: ModelProfile,
    layers: list[int],
    n_tok: int,
    v_rot: frozenset[int] = frozenset(),
    split_hole: bool = False,
    cast_hole: bool = False,
) -> int:
    """Largest FFN intermediate set of the given layers, f32 (see `ffn_layer`)."""
    return max(
        (ffn_layer(profile, il, n_tok, il in v_rot, split_hole, cast_hole)[0] for il in layers), default=0
    )


def ffn_layer(
    profile: ModelProfile,
    il: int,
    n_tok: int,
    v_rot: bool = False,
    split_hole: bool = False,
    cast_hole: bool = False,
) -> tuple[int, int, int]:
    """One layer's FFN intermediate set, its first (largest-shape) intermediate and the input it holds through the
    experts (llama4's router-weighted copy of the FFN input), bytes f32.

    Dense: gate, up and the GLU output `[n_ff, n_tok]` are live together (the down projection comes after gate and
    up are freed). MoE: up, gate, GLU output `[n_ff_exp, n_used, n_tok]` and the experts' down projections
    `[n_embd, n_used, n_tok]`. The last of them to be allocated goes into the two-block hole the FFN norm leaves
    when it fits there (small FFNs), so it adds nothing.

    `split_hole`: the first GPU's FFN phase, where the freed copies of the embeddings inputs leave one-block holes
    with the attention output between them (`PlanBuilder._gpu_blocks`): the hole is one block at most.

    `cast_hole`: the first GPU's layer (without pipeline parallelism) without a cache under flash attention,
    whose K and V are cast to f16 copies
    (src/llama-graph.cpp `build_attn_mha`: "this can happen when KV cache is not used"). The casts take the
    freed attention norm's block, the attention output V's freed block and the output projection the casts'
    freed space at the bottom, so the FFN norm lands in the attention output's freed block next to the freed
    embeddings, and the hole is two blocks, in the graphs without one on the host too
    (`no_ffn_hole`: the diffusion models, whose mask the host allocates between the blocks; on a GPU it is a
    copied input, allocated before them). The allocator's list on the CUDA stand-in, the dream smoke model at
    c512: `node_28` at 0, `norm-0` above it, the GLU output in the norm's and the embeddings' freed blocks
    (4.01 MiB). So too where the attention norm's block is still taken when the attention output is allocated
    (`attn_out_below`: plamo3's Q norm, muse-glimmer's attention gate).

    `v_rot`: the layer's attention output is rotated back (`hadamard_rotations`), which leaves one block of the
    hole: the output chain (flash attention, the rotation's product, the output projection with the residual added
    in place) has one more block-sized tensor, so the FFN input lands next to the FFN norm's block instead of in a
    block of its own (the allocator's trace on the llama smoke model with q8_0 caches: `ffn_inp-0` right above
    `norm-0`, and the GLU output above gate and up, where with f16 caches it takes the norm's two freed blocks).
    """
    hole, above, skip_in_hole = _ffn_hole(profile, v_rot, cast_hole)
    hole = _split(profile, hole, split_hole, cast_hole)
    moe = profile.moe
    lp = profile.layers[il]
    held = 0
    if profile.traits.graph.dense_ffn_only and il not in layer_shapes(profile).dense_up:
        return 0, 0, 0  # the graph calls the dense FFN with no matrices: nothing but an in-place activation
    if lp.is_moe and moe is not None:
        f, first, held = _moe_ffn(profile, moe, il, hole)
    elif il in layer_shapes(profile).gated:
        f, first = 3 * lp.n_ff - (lp.n_ff if lp.n_ff <= hole else 0), lp.n_ff
    else:
        # no gate (build_ffn without `gate`): only the up projection `[n_ff, n_tok]`, its bias, scale and
        # activation computed in place; it goes into the hole when it fits
        f = first = 0 if lp.n_ff <= hole else lp.n_ff
    if skip_in_hole:
        f = max(0, f - profile.n_embd)  # the skip block is in the device's blocks already, inside the hole
    return F32 * n_tok * (f + held + above), F32 * n_tok * first, F32 * n_tok * held


def gate_up_outputs(profile: ModelProfile, il: int, n_tok: int) -> int:
    """The outputs of a layer's gate and up multiplications alone, f32: `[n_ff, n_tok]` each, a MoE layer's
    `[n_ff_exp, n_used, n_tok]` each (a fused gate_up output is both). What the host keeps of an FFN whose GLU and
    down projection run on a GPU (ggml-metal's matrix offload, `PlanBuilder.host_glu_offloaded`): the GLU reads
    both, so they are live together, and nothing of the FFN comes after them on the host."""
    lp = profile.layers[il]
    moe = profile.moe
    if lp.is_moe and moe is not None:
        rows = (lp.n_expert_used or moe.n_expert_used) * (moe.n_ff_exp or lp.n_ff)
    else:
        rows = lp.n_ff
    return F32 * n_tok * 2 * rows


def ffn_norm_hole(profile: ModelProfile, v_rot: bool, split_hole: bool, cast_hole: bool) -> int:
    """The free space under a layer's FFN in `[n_tok]` rows of f32 (`ffn_layer`'s hole): what a later tensor
    can use there (`offloaded_ffn_above`: whether the GLU output of a layer whose matrices
    are copied in fits in it rather than in the space under a mask copied in late)."""
    hole = _ffn_hole(profile, v_rot, cast_hole)[0]
    return _split(profile, hole, split_hole, cast_hole)


def _split(profile: ModelProfile, hole: int, split_hole: bool, cast_hole: bool) -> int:
    """`ffn_layer`'s `split_hole`: on the first GPU the hole is one block at most (not where the casts of a layer
    without a cache leave two)."""
    return min(hole, profile.n_embd) if split_hole and not cast_hole else hole


def _ffn_hole(profile: ModelProfile, v_rot: bool, cast_hole: bool = False) -> tuple[int, int, bool]:
    """The hole under a layer's FFN in `[n_tok]` rows of f32 (`ffn_layer`), the rows allocated above the blocks
    besides the FFN, and whether the skip block sits in the hole."""
    graph = profile.traits.graph
    hole = 0 if graph.no_ffn_hole and not cast_hole else FFN_HOLE_BLOCKS * profile.n_embd
    if graph.no_mixed_batch:
        # the FFN norm output takes the one-block hole of the token-embedding rows (NO_MIXED_BATCH_BLOCKS): once
        # it is freed after up, that block is the only space under the FFN (the cogvlm smoke model's peak: gate,
        # up and the GLU output above `ffn_inp`)
        hole = profile.n_embd
    if graph.residual_into_input:
        # the residual takes the layer input's block: only the FFN norm's own block is freed under the FFN (the
        # allocator's peak on the lfm2 smoke model at c4096: gate in the freed mask, up and the GLU output on top)
        hole = profile.n_embd
    above = 0
    if v_rot and hole and not graph.embd_skip:
        if graph.parallel_attn_ffn:
            # the attention output that waits for the FFN is allocated above the blocks, not in the hole (the
            # command-r smoke model with q8_0 caches: `node_39` between `node_2` and gate, one block more)
            above = profile.n_embd
        else:
            hole -= profile.n_embd
    if graph.parallel_attn_ffn:
        # the attention output waits for the FFN (both read the same norm output) in one block of the hole: the
        # allocator's peak on the command-r smoke model has it there (node_30) and gate, up and the GLU output on top
        hole -= profile.n_embd
    skip_in_hole = graph.embd_skip and bool(hole)
    if skip_in_hole:
        # the skip block (talkie's `embd_skip`, counted with the residual blocks) sits in one block of the hole:
        # the allocator's peak on the talkie smoke model (src/models/talkie.cpp, c512 with flash attention) has
        # `embd` next to the freed `ffn_norm-0` and gate, up and the GLU output on top, 5.27 MiB
        hole -= profile.n_embd
    return hole, above, skip_in_hole


def _moe_ffn(profile: ModelProfile, moe: MoeParams, il: int, hole: int) -> tuple[int, int, int]:
    """A MoE layer's FFN in `[n_tok]` rows of f32: (intermediates, first intermediate, held input)."""
    lp = profile.layers[il]
    used = lp.n_expert_used or moe.n_expert_used
    # expert_feed_forward_length, else feed_forward_length (Mixtral-style GGUFs: llama.cpp uses n_ff)
    n_ff_exp = moe.n_ff_exp or lp.n_ff
    up, down = used * n_ff_exp, used * profile.n_embd
    # the experts' down outputs are allocated after gate and up are freed: they go into that space (two
    # adjacent up-sized blocks) or into the FFN norm's hole when they fit, else above the GLU output
    f, first = 3 * up + (0 if down <= max(hole, 2 * up) else down), up
    if il in layer_shapes(profile).gate_up_exps:
        # one fused gate_up product `[2 n_ff_exp, n_used, n_tok]` (`ffn_gate_up_exps`, build_moe_ffn's merged
        # path): the first intermediate is both (the cohere2moe smoke model's peak: ffn_moe_gate_up-1, 3 MiB,
        # above the blocks where the freed 1 MiB of masks cannot take it, then the GLU output)
        first = 2 * up
    shared = moe.n_ff_shexp * moe.n_expert_shared
    if 3 * shared > f:
        f, first = 3 * shared, shared
    # the router-weighted input [n_embd, n_used, n_tok] feeds gate and up
    held = used * profile.n_embd if profile.traits.graph.weight_before_ffn else 0
    return f, first, held


def expert_copy_hole(
    profile: ModelProfile,
    layer_device: tuple[int | None, ...],
    ffn_dev: dict[int, int | None],
    gi: int,
    layers: list[int],
    n_tok: int,
) -> tuple[int, int, int]:
    """The hole a GPU's masks sit on when its routed experts run on the host: (bytes, layer, last attention layer).

    A layer whose experts run on the host (`-cmoe`, `-ncmoe`, `-ot exps=CPU`) and whose shared expert runs on the
    GPU has its experts' down outputs `[n_embd, n_used, n_tok]` (f32) copied back for the weighted sum. When the
    split that starts with that sum also runs the GPU's first attention layer, the copy and the mask are that
    split's inputs, allocated together: the mask lands above the copy, and once the sum has read the copy its
    space stays a hole under the mask until the last attention layer frees the mask. What the layers in between
    allocate goes into that hole while it fits, the rest above the mask (the allocator's live tensors on
    Qwen3-Next-80B-A3B over two RPC devices, `-cmoe`: the 40 MiB of `ffn_moe_down-2` at 16-56 MiB, the mask at
    56-64 MiB, layer 4's delta-net tensors at 16-50.3 MiB and its 10 MiB output at 68-78 MiB; `-ncmoe 1`: layer 1's
    gate, up and GLU output at 16-46 MiB and its 40 MiB of down outputs at 68-108 MiB).
    """
    base, swa = attn_layers(profile, layers)
    att = sorted(base + swa)
    moe = profile.moe
    if not att or moe is None:
        return 0, -1, -1
    shexp = layer_shapes(profile).shexp
    for il in range(att[0] - 1, -1, -1):
        if il >= len(layer_device) or layer_device[il] != gi:
            return 0, -1, -1  # the split starts with the layer input copied from another device
        if ffn_dev.get(il, gi) == gi:
            continue
        lp = profile.layers[il]
        if ffn_dev.get(il) is not None or not lp.is_moe or il not in shexp:
            return 0, -1, -1  # experts on another GPU, or no shared expert: not traced
        used = lp.n_expert_used or moe.n_expert_used
        return F32 * n_tok * used * profile.n_embd, il, att[-1]
    return 0, -1, -1


def ffn_in_hole(profile: ModelProfile, il: int, n_tok: int, hole: int) -> int:
    """A layer's FFN intermediates over the hole under the masks (`in_hole`): a MoE's gate, up and GLU output
    first, then the experts' down outputs when they do not go into gate and up's space (`ffn_layer`)."""
    f = ffn_layer(profile, il, n_tok)[0]
    lp, moe = profile.layers[il], profile.moe
    if lp.is_moe and moe is not None:
        used = lp.n_expert_used or moe.n_expert_used
        up = F32 * n_tok * used * (moe.n_ff_exp or lp.n_ff)
        down = F32 * n_tok * used * profile.n_embd
        if f == 3 * up + down:
            return in_hole(3 * up, down, hole)
    return in_hole(f, 0, hole)


def shexp_only_ffn(profile: ModelProfile, layers: list[int], n_tok: int) -> int:
    """FFN intermediates on a GPU whose layers' routed experts run elsewhere: the shared expert runs there after
    the experts, its gate, up and GLU output `[n_ff_shexp, n_tok]` over the experts' sum `[n_embd, n_tok]` (the
    allocator's peak on Llama-4-Scout with `-cmoe`: `ffn_moe_out-2`, `ffn_gate-2`, `ffn_up-2`, `ffn_swiglu-2`);
    without a shared expert, the down outputs copied back for the weighted sum."""
    shapes = layer_shapes(profile)
    moe = profile.moe
    out = 0
    for il in layers:
        lp = profile.layers[il]
        if not lp.is_moe or moe is None:
            continue
        if il in shapes.shexp:
            out = max(out, F32 * n_tok * (3 * shapes.shexp_ff + profile.n_embd))
        else:
            # no shared expert: the experts' down outputs [n_embd, n_used, n_tok] are copied back for the
            # weighted sum (qwen3-30b-a3b -cmoe: `ffn_moe_down-0` copied to the first device, 32 MiB)
            out = max(out, F32 * n_tok * (lp.n_expert_used or moe.n_expert_used) * profile.n_embd)
    return out


def offloaded_ffn_peak(profile: ModelProfile, il: int, n_tok: int, mats: dict[str, int]) -> int:
    return _offloaded_ffn(profile, il, n_tok, mats)[0]


def offloaded_down_top(profile: ModelProfile, il: int, n_tok: int, mats: dict[str, int]) -> int:
    """Where the copy of a layer's down matrix ends in `offloaded_ffn_peak`'s replay (0: not copied). The split
    that starts with that copy runs on until the next copied weight, so a graph input first read in between (the
    mask of a model's first attention layer after its recurrent or chunked ones) is allocated right above it, with
    the copy, and stays there until the last layer that reads it (the allocator's list on a CUDA-shaped stand-in,
    Qwen3-Next-80B-A3B with `-cmoe`: layer 3's mask at 446 MiB, right above layer 2's 420 MiB down copy, and
    layer 3's own down copy above the mask)."""
    if any(n.endswith(".bias") for n in mats):
        return 0  # the down projection's bias is copied in after it: the input goes with that copy
    return _offloaded_ffn(profile, il, n_tok, mats)[1]


def offloaded_ffn_above(
    profile: ModelProfile, il: int, n_tok: int, mats: dict[str, int], holes: tuple[int, ...]
) -> int:
    """`offloaded_ffn_peak`'s replay over free blocks of `holes` (the space under a tensor that stays, and the
    FFN norm's hole, `ffn_norm_hole`) under that tensor: how far it reaches above it (0: everything fits below).
    Where the GLU output fits in the norm's hole, the copies keep the space under the tensor to themselves and fit
    there; where it does not, it splits that space and the down copy goes above (Qwen3-Next-80B-A3B: the 10 MiB
    GLU output beside an 8 MiB hole; Llama-4-Scout at 32768 cells with `-cmoe` at `-ub 512`, on the first GPU
    whose norm's hole is one 10 MiB block: the 16 MiB GLU output right above the outputs of gate and up, layer 3's
    525 MiB down copy above the full-attention mask, 1146.51 MiB)."""
    lp = profile.layers[il]
    moe = profile.moe
    used = (lp.n_expert_used or moe.n_expert_used) if lp.is_moe and moe is not None else 1
    n_ff = (moe.n_ff_exp or lp.n_ff) if lp.is_moe and moe is not None else lp.n_ff
    if len(holes) > 1 and F32 * n_tok * used * n_ff <= holes[1]:
        return 0
    return _offloaded_ffn(profile, il, n_tok, mats, holes[:1])[0]


def _offloaded_ffn(
    profile: ModelProfile, il: int, n_tok: int, mats: dict[str, int], holes: tuple[int, ...] = ()
) -> tuple[int, int]:
    """A layer's FFN on the first GPU with its matrices in host memory (op offload): each matrix is copied in at
    the start of the split that multiplies by it and freed after that multiplication, so the copies follow each
    other through one space while the outputs pile up (ggml-backend.cpp `ggml_backend_sched_split_graph`; the
    allocator's list on a CUDA-shaped stand-in, Qwen3-30B-A3B with `-cmoe` at `-ub 512`: gate's 108 MiB copy and
    output, up's copy in gate's space and its output, the GLU output in the freed copies' space, down's 157.5 MiB
    copy above it and its output on top). Replayed with the allocator's best fit (`BestFit`); the highest end above
    what stays live under the FFN."""
    ops, out, down = _offloaded_ffn_ops(profile, il, n_tok, mats)
    if not ops:
        return 0, 0
    sim = BestFit(holes)
    sim.run(ops)
    at, size = sim.live["w"] if down else (0, 0)
    return sim.run([("d", out), ("glu", 0), ("w", 0)]), at + size if down else 0


def offloaded_ffn_ops(
    profile: ModelProfile, il: int, n_tok: int, mats: dict[str, int]
) -> tuple[ReplayOp, ...]:
    """`offloaded_ffn_peak`'s allocations and frees in graph order (empty: nothing of the FFN is copied in), for a
    replay over a live set it does not know (`HostCacheAttention`, `MlaHostCache`): each matrix's copy ("w"),
    freed after its product; the last three ops are the down projection's output ("d", live after them) and the
    frees of the GLU output and the down copy."""
    ops, out, _ = _offloaded_ffn_ops(profile, il, n_tok, mats)
    return (*ops, ("d", out), ("glu", 0), ("w", 0)) if ops else ()


def glu_ffn_ops(profile: ModelProfile, il: int, n_tok: int) -> tuple[ReplayOp, ...]:
    """A layer's gate, up, GLU and down outputs in graph order with its matrices on the GPU (`offloaded_ffn_ops`
    without the copies), for a replay over a live set it does not know (`MlaHostCache`): the allocator's list on
    the CUDA-shaped stand-in, DeepSeek-V2-Lite over two GPUs with `-nkvo` at `-ub 2048`: layer 0's 85.5 MiB gate
    output under the mask, up's and the GLU's above it (523.0 MiB)."""
    rows, out, _ = _glu_rows(profile, il, n_tok)
    if not rows:
        return ()
    return (("g", rows), ("u", rows), ("glu", rows), ("g", 0), ("u", 0), ("d", out), ("glu", 0), ("d", 0))


def _glu_rows(profile: ModelProfile, il: int, n_tok: int) -> tuple[int, int, tuple[str, ...]]:
    """A layer's gate (and up, GLU) output bytes, its down output's, and the names of its matrices (fused gate
    and up, gate, up, down): the routed experts' for a MoE layer."""
    lp = profile.layers[il]
    moe = profile.moe
    if lp.is_moe and moe is not None:
        used = lp.n_expert_used or moe.n_expert_used
        rows = F32 * n_tok * used * (moe.n_ff_exp or lp.n_ff)
        out = F32 * n_tok * used * profile.n_embd
        return rows, out, ("ffn_gate_up_exps", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
    rows = F32 * n_tok * lp.n_ff
    return rows, F32 * n_tok * profile.n_embd, ("ffn_gate_up.", "ffn_gate.", "ffn_up.", "ffn_down.")


def _offloaded_ffn_ops(
    profile: ModelProfile, il: int, n_tok: int, mats: dict[str, int]
) -> tuple[list[ReplayOp], int, int]:
    """`_offloaded_ffn`'s ops to the down matrix's copy, the down product's bytes and the copy's (no ops: none)."""
    rows, out, keys = _glu_rows(profile, il, n_tok)
    w = [next((b for n, b in mats.items() if k in n and n.endswith(".weight")), 0) for k in keys]
    if not rows or not any(w):
        return [], 0, 0
    fused, gate, up, down = w
    # llama4's router-weighted input `[n_embd, n_used, n_tok]` (`_moe_ffn`'s held input), read by gate and up and
    # freed after them, before the GLU output (the allocator's list on the CUDA-shaped stand-in, Llama-4-Scout at
    # 32768 cells with `-cmoe`: `ffn_moe_weighted-3` at the bottom of the space under the late mask, layer 3's gate
    # and up copies above it, and at `-ub 2048` the 64 MiB GLU output no longer fits over the outputs of gate and up
    # there, so it goes to the bottom and the 525 MiB down copy fits above it)
    moe = profile.moe
    held = (
        F32 * n_tok * _moe_ffn(profile, moe, il, 0)[2] if moe is not None and profile.layers[il].is_moe else 0
    )
    ops: list[ReplayOp] = [("wi", held)] if held else []
    if fused:
        ops += [("w", fused), ("gu", 2 * rows), ("w", 0)]
    else:
        if gate:
            ops += [("w", gate), ("g", rows), ("w", 0)]
        ops += [("w", up), ("u", rows), ("w", 0)]
    ops += [("wi", 0), ("glu", rows), ("gu", 0), ("g", 0), ("u", 0), ("w", down)]
    return ops, out, down
