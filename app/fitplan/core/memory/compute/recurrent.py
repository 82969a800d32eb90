"""Recurrent layers: Mamba-1/2 blocks (src/models/mamba-base.cpp), plamo2's (src/models/plamo2.cpp), gated
delta nets, the other slots' states (`llm_graph_context::build_rs`) and a device's Mamba block after its last
attention layer, replayed through the allocator."""

from __future__ import annotations

from dataclasses import dataclass

from fitplan.core.memory.compute.allocator import F32, I32, I64, Affine, BestFit, ReplayOp, replay
from fitplan.core.memory.compute.ffn import FFN_HOLE_BLOCKS
from fitplan.core.memory.compute.terms import SCAN, Cells, loop_over
from fitplan.core.model.profile import ModelProfile


def mamba2_split_below_logits(profile: ModelProfile, layers: list[int], ffn_here: bool, n_tok: int) -> int:
    """Bytes under the logits on a later GPU of a Mamba-2 MoE hybrid that runs a Mamba layer ahead of an
    attention layer (read from the allocator's peaks of granite-4.0-h-tiny split over two RPC devices, with a
    `ggml-alloc.c` built with GGML_ALLOCATOR_DEBUG; 0 elsewhere).

    The Mamba layers free zero-byte tensors (the empty `rs_s_copy` view of the extra recurrent states, a zero-byte
    node after the scan), and `ggml_dyn_tallocr_free_bytes` inserts them as free blocks; once the list is out of
    order a freed region no longer merges into the buffer's free end, so the free end stays where the last layer's
    FFN left it and the logits go above that layer's tensors: the FFN input, the norm output and the one-block
    hole (blocks `[n_embd, n_tok]`), then the experts' gate, up and GLU output `[n_ff_exp, n_used, n_tok]` and the
    down outputs `[n_embd, n_used, n_tok]` above them, which do not fit into gate and up (`-ngl 20`, layers 30-39
    on the output GPU: the logits at 45.04 MiB). With the experts on the host only the down outputs copied back for
    the experts' sum are above the blocks (`-cmoe`: 27.04 MiB). Where the device's first layer is the attention
    layer, or it runs none, the logits stay next to the last blocks (layers 35-39 and 37-39: 9.29 MiB, within a
    block of the one counted with the logits; not modelled)."""
    moe, ssm = profile.moe, profile.ssm
    if moe is None or ssm is None or not ssm.n_group or not profile.traits.graph.mamba_scan or not layers:
        return 0
    lp = profile.layers[layers[-1]]
    first_attn = next((i for i, il in enumerate(layers) if profile.layers[il].has_kv), None)
    if (
        not lp.is_moe
        or first_attn is None
        or not any(profile.layers[il].is_recurrent for il in layers[:first_attn])
    ):
        return 0
    used = lp.n_expert_used or moe.n_expert_used
    up = F32 * n_tok * used * (moe.n_ff_exp or lp.n_ff)
    down = F32 * n_tok * used * profile.n_embd
    if down <= 2 * up:
        return 0  # the down outputs fit into gate and up (`moe_split_below_logits`)
    # the out block the logits are counted with is the FFN input's; the norm output and the hole are two more
    return FFN_HOLE_BLOCKS * F32 * n_tok * profile.n_embd + (3 * up if ffn_here else 0) + down


def ssm_transient(profile: ModelProfile, n_tok: int, n_seqs: int, attention: bool = True) -> int:
    """Live set of one Mamba block during the selective scan, f32 (src/models/graph-context-mamba.cpp).

    Mamba-2 (`ssm.group_count` > 0): the input projection zxBCdt `[2 d_inner + 2 n_group d_state + n_head, n_tok]`
    and the conv output `[channels, n_tok]` (channels = d_inner + 2 n_group d_state) stay live through the scan;
    before them the conv input (conv state + xBC, `[d_conv - 1 + n_tok / n_seqs, channels, n_seqs]`), freed after
    the convolution, and after it the scan output (y `[d_inner, n_tok]` plus the final states
    `[d_state, d_inner, n_seqs]`) take the same space. Mamba-1: zx `[2 d_inner, n_tok]` and the conv output
    `[d_inner, n_tok]`, then the conv input, or x_db `[dt_rank + 2 d_state, n_tok]`, dt `[d_inner, n_tok]` and the
    scan output.
    """
    ssm = profile.ssm
    if ssm is None or not profile.traits.graph.mamba_scan or not ssm.d_inner:
        return 0
    scan = n_tok * ssm.d_inner + ssm.d_state * ssm.d_inner * n_seqs
    if ssm.n_group:
        channels = ssm.d_inner + 2 * ssm.n_group * ssm.d_state
        in_proj = 2 * ssm.d_inner + 2 * ssm.n_group * ssm.d_state + ssm.dt_rank
        conv_in = (ssm.d_conv - 1 + n_tok // max(1, n_seqs)) * channels * n_seqs
        # The conv input is freed after the convolution; the scan output takes its place when it fits there,
        # else it goes above and the conv input's space stays a hole. After the scan, the contiguous copy of z
        # `[d_inner, n_tok]` (for the gated output) needs a free block: what the scan left of the conv input's
        # space, or, on a backend with attention layers, the space of the masks freed after the last of them.
        z = ssm.d_inner * n_tok
        if scan > conv_in:
            floats = in_proj * n_tok + channels * n_tok + conv_in + scan
        else:
            floats = in_proj * n_tok + channels * n_tok + conv_in
            if not attention and conv_in - scan < z:
                floats += z
    else:
        conv_in = (ssm.d_conv - 1 + n_tok // max(1, n_seqs)) * ssm.d_inner * n_seqs
        x_db = (ssm.dt_rank + 2 * ssm.d_state) * n_tok
        rows_hole = F32 * profile.n_embd * n_tok + (I32 + I64) * n_tok
        if not attention and not profile.traits.graph.no_mixed_batch and F32 * x_db <= rows_hole:
            # no attention layer: x_db goes into the space of the mixed batch's token rows, tokens and slots,
            # freed after the first layer's input is assembled (the allocator's peak on the mamba smoke model at
            # c512: `node_32`, 0.504 MiB, at 0.50-1.01 MiB where `inp_mixed_embd` was; 7.77 MiB)
            x_db = 0
        x_db_dt = x_db + ssm.d_inner * n_tok
        floats = 2 * ssm.d_inner * n_tok + ssm.d_inner * n_tok + max(conv_in, x_db_dt + scan)
    return F32 * floats


def mamba1_first_gpu(profile: ModelProfile, n_tok: int, n_seqs: int) -> int:
    """A Mamba-1 model's block on the GPU that holds the input blocks (no attention layer), f32 bytes; 0 where this
    layout does not apply. The scheduler's copies of the mixed batch's inputs, freed once the first layer's input is
    built, leave a two-block hole at the bottom: the conv output `[d_inner, n_tok]` goes there when it fits, x_db
    then above with dt and the scan output (the allocator's trace on the CUDA stand-in, the mamba smoke model at
    c512: `node_28` at 0-1 MiB, then zx, x_db, dt and the scan output above the embeddings and the layer input,
    6.76 MiB; `ssm_transient`'s CPU layout with five blocks is 1 MiB more). Counted with the device's one block
    space fewer (`PlanBuilder._split_first`)."""
    ssm = profile.ssm
    graph = profile.traits.graph
    if ssm is None or not graph.mamba_scan or not ssm.d_inner or ssm.n_group or graph.no_mixed_batch:
        return 0
    if graph.plamo2_mamba or graph.residual_into_input:
        return 0
    conv_out = ssm.d_inner * n_tok
    if conv_out > 2 * profile.n_embd * n_tok:
        return 0
    conv_in = (ssm.d_conv - 1 + n_tok // max(1, n_seqs)) * ssm.d_inner * n_seqs
    scan = n_tok * ssm.d_inner + ssm.d_state * ssm.d_inner * n_seqs
    x_db_dt = (ssm.dt_rank + 2 * ssm.d_state) * n_tok + ssm.d_inner * n_tok
    return F32 * (2 * ssm.d_inner * n_tok + max(conv_in, x_db_dt + scan) - profile.n_embd * n_tok)


def mamba_ops(profile: ModelProfile, n_tok: int, n_seqs: int) -> tuple[ReplayOp, ...]:
    """The allocations of one Mamba block in graph order (src/models/mamba-base.cpp, `build_mamba_layer` and
    `build_mamba2_layer`), f32 bytes; () for models without Mamba blocks. A freed tensor is (name, 0).

    Mamba-2: the conv states' rows, the input projection zxBCdt, the conv input (states + xBC), the conv output
    (bias and SiLU in place) in place of the conv input, dt, then `_mamba2_tail` from the scan on. Mamba-1: the
    same head with xz and the conv output x, then `_mamba1_tail`."""
    ssm = profile.ssm
    if ssm is None or not profile.traits.graph.mamba_scan or not ssm.d_inner:
        return ()
    if profile.traits.graph.plamo2_mamba:
        return _plamo2_mamba_ops(profile, n_tok, n_seqs)
    f, t, seqs = F32, n_tok, max(1, n_seqs)
    d_inner, d_state = ssm.d_inner, ssm.d_state
    # Mamba-2 convolves x, B and C (zxBCdt); Mamba-1 only x (xz)
    ch = d_inner + 2 * ssm.n_group * d_state
    in_proj = 2 * d_inner + 2 * ssm.n_group * d_state + ssm.dt_rank if ssm.n_group else 2 * d_inner
    head = (
        ("conv_rows", f * (ssm.d_conv - 1) * ch * seqs),
        ("in_proj", f * in_proj * t),
        ("conv_x", f * (ssm.d_conv - 1 + t // seqs) * ch * seqs),
        ("conv_rows", 0),
        ("conv", f * ch * t),
        ("conv_x", 0),
    )
    if ssm.n_group:
        return (*head, ("dt", f * ssm.dt_rank * t), *_mamba2_tail(profile, t, seqs))
    return (*head, *_mamba1_tail(profile, t, seqs))


def mamba_first_gpu(profile: ModelProfile, n_tok: int, n_seqs: int) -> int:
    """A Mamba model without attention layers on the first GPU: two of its blocks replayed over the two-block
    hole the scheduler's freed copies of the embeddings inputs leave under the layer input's two blocks (the
    mixed batch's token rows and their `get_rows`, freed once the first layer's input is built;
    `PlanBuilder._split_first`), bytes from the hole's start less the two blocks.

    Each block's allocations in graph order (`mamba_ops`), its input norm after the conv states' rows (`build_rs`
    reads them first; the norm is freed once the input projection has read it). The next block's conv states'
    rows are gathered right after the scan's states are stored (graph order: mamba-base.cpp builds the next
    layer's `build_rs` before this layer's gated output), so they sit above the scan output, which splits the
    space it leaves; the residual's sum takes the place of the first block's output or of the embeddings' copy,
    and the other is freed. Replayed through the allocator (`BestFit`); the allocator's
    traces on the CUDA-shaped stand-in at c512: the mamba smoke model (Mamba-1) with the first block's conv
    output (1 MiB) in the hole, x_db in the conv input's freed space, dt and the scan output on top, 6.76 MiB
    (7.75 counted with five blocks and the host's layout before); mamba2 with the second block's conv input
    (2.01 MiB) above the 12 KiB of rows that split the first one's freed scan space, 10.28 MiB."""
    ops = mamba_ops(profile, n_tok, n_seqs)
    if not ops:
        return 0
    block = F32 * profile.n_embd * n_tok
    rows = ops[0]
    # the first block, with the next block's conv rows after the scan's states (before z's contiguous copy)
    at_z = next(i for i, (name, _) in enumerate(ops) if name == "z")
    first = (rows, ("norm", block), ops[1], ("norm", 0), *ops[2:at_z], ("1.conv_rows", rows[1]), *ops[at_z:])
    second: tuple[ReplayOp, ...] = (("1.norm", block), ("1." + ops[1][0], ops[1][1]), ("1.norm", 0))
    second += tuple(("1." + name, size) for name, size in ops[2:])
    # the residual's sum takes the output projection's place (Mamba-2), or the embeddings' copy's where the sum
    # reads a reshaped view of the projection (Mamba-1: `build_mamba_layer` reshapes its output first); the
    # block's other tensors (what the projection read) are freed by then
    residual = "out" if profile.ssm is not None and profile.ssm.n_group else "embd"
    keep = {residual, "1.conv_rows"}
    done = tuple((name, 0) for name in dict.fromkeys(n for n, size in first if size) if name not in keep)
    sim = BestFit.from_layout((("", 2 * block), ("embd", block), ("inp", block)))
    embd_freed: tuple[ReplayOp, ...] = (("embd", 0),) if residual == "out" else ()
    peak = sim.run((*first, *done, *embd_freed, *second))
    return 2 * block + peak


def _mamba1_tail(profile: ModelProfile, t: int, seqs: int) -> tuple[ReplayOp, ...]:
    """A Mamba-1 block from x_db on (src/models/mamba-base.cpp, `build_mamba_layer`): x_db, then the scan's
    sources in `ggml_ssm_scan`'s order (ggml.c: s, x, dt, A, B, C; the graph is built depth-first through the
    sources, `ggml_visit_parents`): dt's norm (Jamba, FalconMamba) or contiguous copy and its projection, then B's
    and C's norms (the norms read x_db's views, which is freed after the last), the scan output (y and the final
    states; the scan reads the ubatch's states from the cache through the slot indices, no gathered copy), the
    gather of the other slots' states (`_extra_states`), z's contiguous copy, x D and y + x D in place of the conv
    output (its last reader), the gated output and the output projection. The allocator's list on the jamba smoke
    model with four slots at c512 (q4_0 caches): x_db in the freed mask's space, dt in the conv input's, the
    scan output on top of the conv output, 8.87 MiB."""
    ssm = profile.ssm
    assert ssm is not None
    f, d_inner, d_state = F32, ssm.d_inner, ssm.d_state
    normed = any(x.name.endswith(".ssm_dt_norm.weight") for x in profile.tensors)
    bc: tuple[ReplayOp, ...] = (("b_n", f * d_state * t), ("c_n", f * d_state * t)) if normed else ()
    return (
        ("x_db", f * (ssm.dt_rank + 2 * d_state) * t),
        ("dt_n", f * ssm.dt_rank * t),
        ("dt", f * d_inner * t),
        ("dt_n", 0),
        *bc,
        *((("x_db", 0),) if normed else ()),
        ("y_ssm", f * (d_inner * t + d_state * d_inner * seqs)),
        ("dt", 0),
        ("b_n", 0),
        ("c_n", 0),
        ("x_db", 0),
        *_extra_states(f * d_state * d_inner, seqs),
        ("z", f * d_inner * t),
        ("in_proj", 0),
        ("y_ssm", 0),
        ("gated", f * d_inner * t),
        ("z", 0),
        ("conv", 0),
        ("out", f * profile.n_embd * t),
    )


def _mamba2_tail(profile: ModelProfile, t: int, seqs: int) -> tuple[ReplayOp, ...]:
    """A Mamba-2 block from the scan on (src/models/mamba-base.cpp, `build_mamba2_layer`): the scan output (y and
    the final states), the gather of the other slots' states (`_extra_states`), z's contiguous copy, x D (a new
    tensor: the conv output has other views, so it cannot take its space; y + x D is computed in its place), the
    gated output, its grouped RMS norm (a new tensor: it reads a reshaped view) and the output projection. The
    allocator's lists on the granitehybrid and nemotron_h smoke models with four slots (c512, q4_0 caches): the
    scan output in the conv input's space, the 0.75 MiB of states in the masks' and z's copy on top, 10.90 MiB."""
    ssm = profile.ssm
    assert ssm is not None
    f, d_inner = F32, ssm.d_inner
    normed = any(x.name.endswith(".ssm_norm.weight") for x in profile.tensors)
    return (
        ("y_ssm", f * (d_inner * t + ssm.d_state * d_inner * seqs)),
        ("dt", 0),
        *_gated_with_x_d(f * d_inner * t, f * ssm.d_state * d_inner, seqs, "in_proj"),
        *((("normed", f * d_inner * t), ("gated", 0)) if normed else ()),
        ("out", f * profile.n_embd * t),
    )


def _gated_with_x_d(row: int, state: int, seqs: int, projection: str) -> tuple[ReplayOp, ...]:
    """After a Mamba-2 scan (mamba-base.cpp `build_mamba2_layer`, plamo2.cpp `build_plamo2_mamba_layer`): the
    gather of the other slots' states, z's contiguous copy (then `projection`, z's source, is freed), x D as a
    tensor of its own (the conv output's views keep it from reusing their space; y + x D in its place), the
    gated output; `row` is one `[d_inner, n_tok]` f32 tensor's bytes, `state` one slot's states'."""
    return (
        *_extra_states(state, seqs),
        ("z", row),
        (projection, 0),
        ("x_d", row),
        ("conv", 0),
        ("y_ssm", 0),
        ("gated", row),
        ("z", 0),
        ("x_d", 0),
    )


def _plamo2_mamba_ops(profile: ModelProfile, n_tok: int, n_seqs: int) -> tuple[ReplayOp, ...]:
    """PLaMo-2's Mamba block in graph order (src/models/plamo2.cpp, `build_plamo2_mamba_layer`): the conv states'
    rows, the input projection zx and its permuted contiguous copy, x's contiguous copy, the conv input and
    output, the B/C/dt projection, then the scan's sources in `ggml_ssm_scan`'s order (dt's norm and projection,
    then B's and C's norms: the graph is built depth-first through the sources, ggml.c `ggml_visit_parents`), the
    scan output, the gather of the other sequences' states (`_extra_states`), z's contiguous copy, x D (a new
    tensor: the conv output's views keep it from reusing their space; y + x D is computed in its place), the
    gated output and the output projection. The allocator's peaks on the plamo2 smoke model: c512 with flash
    attention, the conv output in the freed mask's space, the scan output in the input projection's, its permuted
    copy and z's copy on top, 8.02 MiB; c8192 with four slots at `-ub 2048` (q8_0 caches), the scan output (5 MiB)
    on top of the permuted copy, no freed block holding it, 31.16 MiB."""
    ssm = profile.ssm
    assert ssm is not None
    f, t, seqs = F32, n_tok, max(1, n_seqs)
    d_inner, d_state = ssm.d_inner, ssm.d_state
    dt_dim = max(64, profile.n_embd // 16)
    return (
        ("conv_rows", f * (ssm.d_conv - 1) * d_inner * seqs),
        ("in_proj", f * 2 * d_inner * t),
        ("in_proj_out", f * 2 * d_inner * t),
        ("in_proj", 0),
        ("x_split", f * d_inner * t),
        ("conv_x", f * (ssm.d_conv - 1 + t // seqs) * d_inner * seqs),
        ("conv_rows", 0),
        ("x_split", 0),
        ("conv", f * d_inner * t),
        ("conv_x", 0),
        ("x_bcdt", f * (2 * d_state + dt_dim) * t),
        ("dt_n", f * dt_dim * t),
        ("dt", f * ssm.dt_rank * t),
        ("dt_n", 0),
        ("b_n", f * d_state * t),
        ("c_n", f * d_state * t),
        ("x_bcdt", 0),
        ("y_ssm", f * (d_inner * t + d_state * d_inner * seqs)),
        ("dt", 0),
        ("b_n", 0),
        ("c_n", 0),
        *_gated_with_x_d(f * d_inner * t, f * d_state * d_inner, seqs, "in_proj_out"),
        ("out", f * profile.n_embd * t),
    )


def _extra_states(state: int, n_seqs: int) -> tuple[ReplayOp, ...]:
    """The gather of the SSM states the ubatch leaves alone, right after the scan (src/llama-graph.cpp,
    `llm_graph_context::build_rs` with a custom row getter: `ggml_get_rows` of `s_copy_tail`, n_rs - 1 rows of
    `state` bytes, copied back into the cache and freed). At the reserve the recurrent memory is full, n_rs is its
    size, n_seq_max; the allocator's lists on the granitehybrid, nemotron_h and plamo2 smoke models: 0.25 MiB with
    two slots, 0.75 MiB with four, none with one."""
    if n_seqs <= 1:
        return ()
    return (("s_extra", state * (n_seqs - 1)), ("s_extra", 0))


def gdn_transient(profile: ModelProfile, n_tok: int, n_seqs: int) -> int:
    """Live set of a gated-delta-net layer when its fused op's output is allocated, bytes (f32).

    With head_k = `ssm.state_size`, num_k = `ssm.group_count`, num_v = `ssm.time_step_rank`, head_v = d_inner /
    num_v: the convolution output `[d_inner + 2 num_k head_k, n_tok]` (Q, K and V are views of it), the L2-normed
    Q and K repeated to num_v heads `[head_k, num_v, n_tok]` each (the normed ones themselves when num_k = num_v),
    beta and the gate's input `[num_v, n_tok]`, the recurrent state read from the cache `[head_v, head_v, num_v,
    n_seqs]` and the op's output: the attention output `[head_v, num_v, n_tok]` followed by the new state. The
    gate z `[d_inner, n_tok]` is computed after the op (it is read only by the gated norm). Measured with the
    allocator's list of live tensors: 44.12 MiB on Qwen3-Next-80B-A3B at `-ub 512` (16 + 8 + 8 + 2 + 10 MiB and
    two 64 KiB inputs), 3.26 MiB on the qwen35 smoke model.

    The state read from the cache (`build_rs`'s `ggml_get_rows` of the slots' rows, at the head of the layer) is
    allocated while one of the `[n_embd, n_tok]` blocks under the layer is free (the mixed batch's token rows,
    freed once the first layer's input is built, or a block the previous layer left), and takes it when it fits
    there: it then adds nothing above them (the allocator's trace on Qwen3-Next-80B-A3B at c4096: every layer's
    2 MiB state at 4.00 or 16.02 MiB, in a freed 4 MiB block; the qwen35 smoke model with four slots at c512: the
    0.5 MiB of states in the freed 0.5 MiB block, 6.53 MiB, 7.03 counted before).
    """
    ssm = profile.ssm
    if ssm is None or not profile.traits.graph.gated_delta_net or not (ssm.d_inner and ssm.dt_rank):
        return 0
    head_k, num_k, num_v = ssm.d_state, ssm.n_group, ssm.dt_rank
    head_v = ssm.d_inner // num_v
    state = head_v * head_v * num_v * n_seqs
    read = 0 if state <= profile.n_embd * n_tok else state
    conv = (ssm.d_inner + 2 * num_k * head_k) * n_tok
    qk = 2 * head_k * num_v * n_tok
    return F32 * (conv + qk + 2 * num_v * n_tok + read + ssm.d_inner * n_tok + state)


def gdn_host_conv_copy(profile: ModelProfile, n_tok: int, n_seqs: int) -> int:
    """A gated delta net's conv states in host memory while a GPU runs the layer (`-nkvo`, or the layer's weights
    on the host with op offload): the copy of the conv state's last columns back into the cache runs on the host,
    where its destination is, so the scheduler copies its source in, a strided view of the conv input
    `[d_conv - 1 + n_tok / n_seqs, channels, n_seqs]` (channels = d_inner + 2 num_k head_k) at the view's
    `ggml_nbytes` (as `mamba2_host_state_copies`), bytes; 0 for other models. The delta-net op itself is offloaded
    (its output has a row per token). The allocator's peaks on the CUDA-shaped stand-in, Qwen3-Next-80B-A3B at
    c8192 with flash attention (`-nkvo`, `-ngl 24`, `-ngl 0`): `conv_state_last`'s 16.09 MiB copy at 16.02 MiB,
    in the space of the embeddings' blocks freed above the mask, 32.11 MiB; 128.2 MiB at `-ub 2048`."""
    ssm = profile.ssm
    if ssm is None or not profile.traits.graph.gated_delta_net or not (ssm.d_inner and ssm.dt_rank):
        return 0
    seqs = max(1, n_seqs)
    ch = ssm.d_inner + 2 * ssm.n_group * ssm.d_state
    rows = ssm.d_conv - 1 + n_tok // seqs
    return F32 * ((ssm.d_conv - 2) + (ch - 1) * rows + (seqs - 1) * ch * rows + 1)


def gdn_output(profile: ModelProfile, n_tok: int, n_seqs: int) -> int:
    """The fused gated-delta-net op's output, the last tensor of `gdn_transient`: the attention output
    `[head_v, num_v, n_tok]` followed by the new state `[head_v, head_v, num_v, n_seqs]`, bytes (f32)."""
    ssm = profile.ssm
    if ssm is None or not profile.traits.graph.gated_delta_net or not (ssm.d_inner and ssm.dt_rank):
        return 0
    head_v = ssm.d_inner // ssm.dt_rank
    return F32 * (ssm.d_inner * n_tok + head_v * head_v * ssm.dt_rank * n_seqs)


@dataclass(frozen=True, slots=True)
class SsmLead:
    """The space around the host's last attention layer (flash attention) before the Mamba blocks after it, for
    replaying that layer's tail with them (`SsmReplay`). The allocator's lists on the granitehybrid and
    nemotron_h smoke models: when the attention output is allocated, the graph inputs the layer has read are free
    below the blocks, in their allocation order (the mixed batch's tokens and slots and the token rows' block, K's
    rotation and the positions, then the K/V row indices and the mask), split in two by V's rotation, which stays
    live until the attention output is rotated back; above them the embeddings' block and the attention output's."""

    mask: Affine  # the masks, freed after the attention
    low: int  # the lower free block besides the token rows' block: mixed tokens and slots, K's rotation, positions
    v_rot: int  # V's rotation input (0: none, the two free blocks are one)
    idxs: int  # the K/V row indices, under the mask
    ffn: int  # the last attention layer's FFN intermediate [n_ff, n_tok] (0: that layer has no FFN)
    gated: bool  # its FFN has a separate gate
    # jamba: the residual goes into the layer input's block (`SsmReplay._ssm_after_residual`), with or without
    # flash attention; `tokens` and `out_ids` are the token ids' and the output ids' bytes
    residual: bool = False
    fa: bool = True
    tokens: int = 0
    out_ids: int = 0


@dataclass(frozen=True, slots=True)
class SsmReplay:
    """The Mamba blocks after a device's last attention layer: their allocations (`mamba_ops`), replayed over the
    freed masks' space (with the block of the layer's input in it), the block under it and the FFN norm's
    two-block hole."""

    ops: tuple[ReplayOp, ...]
    hole: Affine
    block: int
    residual_in_input: bool = False
    after_attention_only: bool = False
    lead: SsmLead | None = None
    label: str = SCAN
    # the first GPU (`PlanBuilder._split_first`): the scheduler's freed copies of the embeddings inputs join the
    # masks' space in one free block, and the layer input's blocks are one fewer
    first_gpu: bool = False

    def at(self, nb: int, ns: int) -> int:
        """The replayed Mamba block's extent above the blocks. Where the layer's input stays in the input's
        block (jamba adds the residual into it; plamo2's first layer output takes the embeddings' block) the
        token rows' block and the masks are one free block, with the FFN norm's block beside it (the allocator's
        peaks on the jamba and plamo2 smoke models); else the previous layer's output takes a block of the masks'
        space, between the token rows' block and the rest, and the FFN norm leaves two blocks (granitehybrid,
        nemotron_h). On the host with flash attention the last attention layer's tail is replayed with the block
        instead (`_ssm_after_lead`); jamba's Mamba-1 block over the inputs its attention layer freed
        (`_ssm_after_residual`)."""
        if not self.ops:
            return 0
        b, hole = self.block, self.hole.at(nb, ns)
        if self.lead is not None and self.lead.residual and self.first_gpu:
            # jamba on the first GPU: the residual stays in the embeddings' copy between the freed copies' two
            # blocks and the freed masks' space (the allocator's peak on the CUDA-shaped stand-in, jamba smoke
            # model at c512: the conv rows and the input norm in the masks' space, xz and the conv input on
            # top, the conv output in the copies' blocks, x_db in the masks' space, dt, B's and C's norms and
            # the scan output on top, 7.26 MiB; 8.26 counted with the host's layout before)
            sim = BestFit.from_layout((("", FFN_HOLE_BLOCKS * b), ("embd", b), ("", hole), ("inp", b)))
            return sim.run((self.ops[0], ("norm", b), self.ops[1], ("norm", 0), *self.ops[2:])) - b
        if self.lead is not None and self.lead.residual:
            return self._ssm_after_residual(self.lead, nb, ns)
        if self.lead is not None:
            return self._ssm_after_lead(self.lead, nb, ns)
        if self.residual_in_input:
            return replay(self.ops, (hole + b, b))
        if self.after_attention_only:
            # flash attention and a last attention layer without FFN (nemotron_h's attention-only layers): the
            # token rows' block and the masks are one free block; the conv states' rows go at its bottom and the
            # attention layer's output `l_out` right above them (it is computed after them in graph order), while
            # the next norm and the embedding rows hold the FFN norm's two blocks until the input projection has
            # read the norm (the allocator's peaks on the nemotron_h_moe smoke model: `node_33` and `node_39` at
            # 0.50-1.01 MiB; at c2048 the conv output, 2 MiB, in the freed 2 MiB mask, 9.53 MiB; at c4096 the input
            # projection zxBCdt in it, 10.53 MiB; with four sequences at c8192 the 48 KiB of conv rows leave
            # 1.97 MiB, too little for the conv output, 11.57 MiB). With q8_0 caches at c2048 the trace differs:
            # the layer's output in one block of the FFN norm's two and the conv input (2.01 MiB) in the freed
            # 2.59 MiB, for the same peak (9.60 MiB; this replay gives 9.61); with q4_0 caches and four sequences
            # at c512 the contiguous copy of z goes on top (10.90 MiB, this replay 9.90)
            fill = ("norm_blocks", FFN_HOLE_BLOCKS * b)
            ops = (
                fill,
                self.ops[0],
                ("l_out", b),
                self.ops[1],
                ("norm_blocks", 0),
                *self.ops[2:],
            )
            return replay(ops, (hole + b, FFN_HOLE_BLOCKS * b))
        if self.first_gpu:
            # the previous layer's output in the first copy's block, the next copy's block, the embeddings' copy
            # and the masks' space one free block under the mixed batch's rows (the allocator's peak on the
            # CUDA-shaped stand-in, granitehybrid smoke model at c512 without flash attention: the conv input,
            # 2.01 MiB, in the freed 3.01 MiB, the input projection and the conv output on top, 9.02 MiB; 11.52
            # counted with the host's holes before)
            return replay(self.ops, (hole + FFN_HOLE_BLOCKS * b,)) - b
        return replay(self.ops, (b, max(0, hole - b), FFN_HOLE_BLOCKS * b))

    def _ssm_after_lead(self, lead: SsmLead, nb: int, ns: int) -> int:
        """The last attention layer's tail and the Mamba block after it, replayed from the attention output on
        (src/llama-graph.cpp `llm_graph_context::build_attn`, then the layer's FFN, `build_ffn`, and the Mamba
        block): the conv states' rows (built ahead of the output projection in graph order), V's rotation of the
        attention output (quantized V cache), the output projection, the FFN (norm, gate and up, the GLU output,
        which is a new tensor, and the down projection, which takes a freed block only where one of its size is
        left: the masks' space less the conv rows and the projection, or what the GLU output left of the FFN
        norm's), then the Mamba block with its input norm. The allocator's lists on the granitehybrid smoke model:
        with one slot the down projection in the masks' space (0.504 MiB left, 10.04 MiB); with two or four the
        conv rows (24 or 48 KiB) leave too little and it goes on top (10.55, 10.57 MiB); with q4_0 caches and four
        slots the GLU output on top and the down projection in the FFN norm's block, the Mamba block's z copy on
        top of the conv output (10.90 MiB; nemotron_h's attention-only layer alike)."""
        b = self.block
        ops = self.ops
        a2 = lead.idxs + lead.mask.at(nb, ns)
        free: tuple[tuple[str, int], ...] = (
            (("", b + lead.low), ("v_rot", lead.v_rot), ("", a2))
            if lead.v_rot
            else (("", b + lead.low + a2),)
        )
        # the output ids between the inputs and the embeddings' block, the layer input above the attention output
        sim = BestFit.from_layout((*free, ("ids", 1), ("embd", b), ("fa_out", b), ("inp", 1)))
        seq: list[ReplayOp] = [ops[0]]
        if lead.v_rot:
            seq += [("v_out", b), ("v_rot", 0), ("fa_out", 0), ("wo", b), ("v_out", 0)]
        else:
            seq += [("wo", b), ("fa_out", 0)]
        seq.append(("embd", 0))
        if lead.ffn:
            seq.append(("ffn_norm", b))
            if lead.gated:
                seq += [("gate", lead.ffn), ("up", lead.ffn), ("ffn_norm", 0), ("glu", lead.ffn)]
                seq += [("gate", 0), ("up", 0), ("down", b), ("glu", 0)]
            else:
                seq += [("up", lead.ffn), ("ffn_norm", 0), ("down", b), ("up", 0)]
            seq.append(("wo", 0))  # the FFN input: the layer output is the down projection's
        seq += [("norm", b), ops[1], ("norm", 0), *ops[2:]]
        return sim.run(seq)

    def _ssm_after_residual(self, lead: SsmLead, nb: int, ns: int) -> int:
        """Jamba's Mamba-1 block after the host's last attention layer, replayed from the conv states' rows on
        (src/models/jamba.cpp: the attention's residual is added into the layer input's block, the FFN's into that
        sum; src/models/mamba-base.cpp `build_mamba_layer`). The conv states' rows are gathered inside the
        attention layer in graph order (after the attention output, before the output projection), when the
        space below holds, from the bottom: the freed plain token ids, the token rows' block, the freed mixed
        batch's tokens, slots and token rows, the rotations, the K/V row indices and the mask (flash attention:
        split by V's rotation, which is still live; without it the attention output `kqv_out` is at its bottom),
        the output ids, the layer input's block, the attention output's block (flash attention: still live;
        without it the freed `kqv`) and the last block; the rows take the smallest free block that fits
        (ggml-alloc.c, `ggml_dyn_tallocr_alloc`). By the Mamba block the layer's other tensors are freed; its
        input norm takes the smallest free block, then the block's allocations (`mamba_ops`). The allocator's
        lists on the jamba smoke model: c4096 with flash attention, the rows at the freed inputs' bottom, the norm
        in the attention output's block, xz, the conv input and output in the mask's space, x_db in the conv
        input's, dt and the scan output on top (8.77 MiB); without flash attention at c512 the rows in the freed
        `kqv` block, the norm and xz in the freed inputs, the conv input and output, dt and the scan output on top
        (8.77 MiB); q4_0 caches with four slots, the rows in the mask's block (8.87 MiB)."""
        b, ops = self.block, self.ops
        low = lead.low + b  # the mixed batch's tokens, slots and token rows
        a2 = lead.idxs + lead.mask.at(nb, ns)
        if not lead.fa:
            free: tuple[tuple[str, int], ...] = (("kqv_out", b), ("", low - b + lead.v_rot + a2))
        elif lead.v_rot:
            free = (("", low), ("v_rot", lead.v_rot), ("", a2))
        else:
            free = (("", low + a2),)
        top = ("fa_out", b) if lead.fa else ("", b)
        inputs = (("", lead.tokens), ("inp_embd", b))
        sim = BestFit.from_layout((*inputs, *free, ("out_ids", lead.out_ids), ("embd", b), top, ("last", b)))
        seq: list[ReplayOp] = [ops[0], ("v_rot", 0), ("kqv_out", 0), ("fa_out", 0)]
        seq += [("norm", b), ops[1], ("norm", 0), *ops[2:]]
        return sim.run(seq)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return loop_over(self, nb, ns)


def mamba2_host_state_copies(profile: ModelProfile, n_tok: int, n_seqs: int, scan_on_host: bool) -> int:
    """What a Mamba-2 model's recurrent states in host memory add to the host's compute buffer while a GPU runs
    the rest of those layers (op offload with the layers' weights on the host, or `-nkvo`), bytes; 0 for other
    models.

    The copy of the conv state's last columns back into the cache (mamba-base.cpp `build_mamba2_layer`:
    `ggml_cpy(last_conv, ggml_view_1d(conv_states_all, ...))`) runs where its destination is, the host
    (ggml-backend.cpp `ggml_backend_sched_backend_id_from_cur`, "1.vsrc"), so the scheduler copies its source,
    a strided view of the concatenated conv input `[d_conv - 1 + n_tok / n_seqs, channels, n_seqs]`, in at the
    view's `ggml_nbytes` (nearly the whole conv input). Where the layer's weights are on the host the scan runs
    there too: its output is one-dimensional (ggml.c `ggml_ssm_scan`: `ggml_new_tensor_1d`), one row, below the
    batch from which ggml-cuda offloads an op (ggml-cuda.cu `get_op_batch_size`: `ggml_nrows`), so it stays with
    its weight `ssm_a`; the scheduler copies in its sources computed on the GPU: x, B and C, strided views of
    the conv output `[channels, n_tok]` (each copied at its `ggml_nbytes`, a whole row less the channels after
    it), and dt `[n_head, n_tok]` (it fits into a freed block, not counted), and the scan output (y and the final
    states) is allocated next to them. The conv input's copy is freed before the scan's sources come: the
    larger of the two counts. Under them, the copy of the mixed batch's embeddings (`build_inp_embd`'s mixed
    path, a DUP of `inp_mixed_embd`) stays on the host, one `[n_embd, n_tok]` block. The allocator's lists on
    the CUDA-shaped stand-in, granite-4.0-h-tiny at c8192 with flash attention: `-nkvo` 29.55 MiB (the inputs'
    20.02, the block, the conv input's copy 6.54); `-ngl 20` and `-ngl 0` 49.99 MiB (the inputs, the block, x
    6.50, B and C 6.49 each, the scan output 7.5); at `-ub 2048` 195.5 MiB."""
    ssm = profile.ssm
    graph = profile.traits.graph
    if ssm is None or not ssm.n_group or not graph.mamba_scan or graph.plamo2_mamba or not ssm.d_inner:
        return 0
    seqs = max(1, n_seqs)
    n_t = n_tok // seqs
    ch = ssm.d_inner + 2 * ssm.n_group * ssm.d_state
    rows = ssm.d_conv - 1 + n_t
    # ggml_nbytes of a strided view: the last element's offset plus one element
    conv_copy = F32 * ((ssm.d_conv - 2) + (ch - 1) * rows + (seqs - 1) * ch * rows + 1)
    copies = conv_copy
    if scan_on_host:
        last_row = ch * (n_t * seqs - 1)  # the offset of the last token's row in the conv output
        x = F32 * (ssm.d_inner + last_row)
        b_c = 2 * F32 * (ssm.n_group * ssm.d_state + last_row)
        scan = F32 * (ssm.d_inner * n_tok + ssm.d_state * ssm.d_inner * seqs)
        copies = max(conv_copy, x + b_c + scan)
    return F32 * profile.n_embd * n_tok + copies
