"""Per-model facts the compute terms read: layer shapes, attention layers, hyper-connection width, tensor rows
and what the weight placement says about each layer's device (memoised per profile or placement)."""

from __future__ import annotations

from dataclasses import dataclass

from fitplan.core.base.cache import AnchoredCache
from fitplan.core.gguf.ggml_types import type_id
from fitplan.core.memory.weights import WeightPlacement
from fitplan.core.model.profile import LayerKind, ModelProfile, TensorRole


def kv_type_id(name: str) -> int:
    """The ggml type of a mainline cache type name ("q8_0")."""
    return type_id(name)


@dataclass(frozen=True, slots=True)
class _LayerShapes:
    """Per-layer graph facts read from the tensor list (cached per profile)."""

    # dense FFN with a gate: `ffn_gate`, or `ffn_up` holding gate and up (2 x n_ff rows)
    gated: frozenset[int]
    qkv_rows: dict[int, int]  # fused `attn_qkv` output width per layer
    dense_up: frozenset[int] = frozenset()  # layers with a dense `ffn_up` matrix
    shexp: frozenset[int] = frozenset()  # layers with a shared expert (`ffn_up_shexp`)
    shexp_ff: int = 0  # the widest shared expert's rows (`ffn_up_shexp`; llama4 declares no such length)
    gate_up_exps: frozenset[int] = frozenset()  # layers with fused expert gate and up (`ffn_gate_up_exps`)


#: Per profile (shared by the estimator's threads).
_SHAPES: AnchoredCache[_LayerShapes] = AnchoredCache(16)


def layer_shapes(profile: ModelProfile) -> _LayerShapes:
    return _SHAPES.get_or_compute(id(profile), (profile,), lambda: _compute_layer_shapes(profile))


def _compute_layer_shapes(profile: ModelProfile) -> _LayerShapes:
    gated: set[int] = set()
    qkv: dict[int, int] = {}
    up: set[int] = set()
    shexp: set[int] = set()
    gate_up_exps: set[int] = set()
    shexp_ff = 0
    for t in profile.tensors:
        il = t.layer
        if il is None or il >= len(profile.layers) or len(t.shape) < 2:
            continue
        if t.name.endswith(".ffn_up_shexp.weight"):
            shexp.add(il)
            shexp_ff = max(shexp_ff, t.shape[1])
        if t.name.endswith(".ffn_up.weight"):
            up.add(il)
        if t.name.endswith(".ffn_gate_up_exps.weight"):
            gate_up_exps.add(il)
        if ".ffn_gate." in t.name or ".ffn_gate_up." in t.name:
            gated.add(il)
        elif (
            t.name.endswith(".ffn_up.weight")
            and profile.layers[il].n_ff
            and t.shape[1] >= 2 * profile.layers[il].n_ff
        ):
            gated.add(il)  # fused gate + up (phi3, chatglm, glm4): the GLU splits one [2 n_ff] output
        elif t.name.endswith(".attn_qkv.weight"):
            qkv[il] = t.shape[1]
    return _LayerShapes(
        frozenset(gated), qkv, frozenset(up), frozenset(shexp), shexp_ff, frozenset(gate_up_exps)
    )


def hc_width(profile: ModelProfile) -> int:
    """Elements per token of one hyper-connection residual `n_embd x hc` (from `hc_attn_fn` / `hc_attn_down`,
    whose rows span all streams), 0 when the model has none (cached per profile)."""
    return _HC_WIDTH.get_or_compute(id(profile), (profile,), lambda: _find_hc_width(profile))


_HC_WIDTH: AnchoredCache[int] = AnchoredCache(16)


def _find_hc_width(profile: ModelProfile) -> int:
    for t in profile.tensors:
        if t.name.endswith((".hc_attn_fn.weight", ".hc_attn_down.weight")) and len(t.shape) > 1:
            return t.shape[0]
    return 0


def indexer_q_rows(profile: ModelProfile) -> dict[int, int]:
    """Per layer, the rows of its indexer query projection (architectures with `GraphTraits.indexer_q_copies`)."""
    if not profile.traits.graph.indexer_q_copies:
        return {}
    out: dict[int, int] = {}
    for t in profile.tensors:
        if (
            t.layer is not None
            and t.name.endswith((".indexer.attn_q_b.weight", ".indexer.q_proj.weight"))
            and len(t.shape) > 1
        ):
            out[t.layer] = t.shape[1]
    return out


def tensor_rows(profile: ModelProfile, suffix: str) -> dict[int, int]:
    """Per layer, the rows (output width) of its tensor named `blk.N<suffix>`."""
    return {
        t.layer: t.shape[1]
        for t in profile.tensors
        if t.layer is not None and t.name.endswith(suffix) and len(t.shape) > 1
    }


def attn_layers(profile: ModelProfile, layers: list[int]) -> tuple[list[int], list[int]]:
    """The attention layers among `layers`: those of the base cache, those of the SWA cache (cached per profile
    and layer set: every backend's plan asks for its own layers, each estimate again)."""
    base, swa = _ATTN_LAYERS.get_or_compute(
        (id(profile), tuple(layers)), (profile,), lambda: _split_attn_layers(profile, layers)
    )
    return list(base), list(swa)


_ATTN_LAYERS: AnchoredCache[tuple[tuple[int, ...], tuple[int, ...]]] = AnchoredCache(256)


def _split_attn_layers(profile: ModelProfile, layers: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    base: list[int] = []
    swa: list[int] = []
    for il in layers:
        lp = profile.layers[il]
        if lp.kind in (LayerKind.RECURRENT, LayerKind.NEXTN) or lp.n_head == 0:
            continue
        if lp.kind is LayerKind.NONE and profile.has_memory:
            continue  # an MLP-only layer; in models without a memory module every layer attends without a cache
        (swa if lp.is_swa else base).append(il)
    return tuple(base), tuple(swa)


def kv_a_mqa_rows(profile: ModelProfile) -> dict[int, tuple[int, int, int]]:
    """Per layer, the rows of `attn_kv_a_mqa`, of its norm and of `attn_kv_b` (minicpm3), empty for other
    architectures."""
    kv_a_mqa: dict[int, tuple[int, int, int]] = {}
    if profile.traits.graph.kv_a_mqa:
        norms = {t.layer: t.shape[0] for t in profile.tensors if t.name.endswith(".attn_kv_a_norm.weight")}
        kv_b = {
            t.layer: t.shape[1]
            for t in profile.tensors
            if t.name.endswith(".attn_kv_b.weight") and len(t.shape) > 1
        }
        for t in profile.tensors:
            if t.layer is not None and t.name.endswith(".attn_kv_a_mqa.weight") and len(t.shape) > 1:
                kv_a_mqa[t.layer] = (t.shape[1], norms.get(t.layer, 0), kv_b.get(t.layer, 0))
    return kv_a_mqa


#: Per placement (shared by the estimator's threads).
_DERIVED: AnchoredCache[tuple[dict[int, int | None], dict[int | None, dict[str, int]]]] = AnchoredCache(16)


def _placement_facts(
    placement: WeightPlacement,
) -> tuple[dict[int, int | None], dict[int | None, dict[str, int]]]:
    """Per placement (cached: placements are reused across contexts): the device of each layer's FFN / expert
    matrices (an override can move them off the layer's device), and the host-resident matrix weights of each
    layer (None: the output layer's)."""
    return _DERIVED.get_or_compute(id(placement), (placement,), lambda: _compute_placement_facts(placement))


def _compute_placement_facts(
    placement: WeightPlacement,
) -> tuple[dict[int, int | None], dict[int | None, dict[str, int]]]:
    ffn: dict[int, int | None] = {}
    host: dict[int | None, dict[str, int]] = {}
    ffn_role, exp_role = TensorRole.FFN, TensorRole.EXPERTS
    for p in placement.tensors:
        role = p.role
        il = p.layer
        if il is not None and (role is ffn_role or role is exp_role) and (role is exp_role or il not in ffn):
            ffn[il] = p.device
        if p.device is not None:
            continue
        if p.matrix or (il is None and p.name == "token_embd.weight"):
            # the output layer's matrix: output.weight, or with tied embeddings the token embeddings (their copy
            # for the output layer, or themselves when the output layer stays on the host too)
            if il is None and not (p.duplicate or p.name in ("output.weight", "token_embd.weight")):
                continue
            host.setdefault(il, {})[p.name] = max(p.n_bytes, host.get(il, {}).get(p.name, 0))
        elif il is not None and p.name.endswith((".ffn_down_exps.bias", ".ffn_down.bias")):
            # a bias added after the down projection is a weight of its own op: its copy starts the next split
            host.setdefault(il, {})[p.name] = p.n_bytes
    return ffn, host


def ffn_devices(profile: ModelProfile, placement: WeightPlacement) -> dict[int, int | None]:
    """Device of each layer's FFN / expert matrices (they can differ from the layer's device with -ot/-cmoe)."""
    del profile
    return _placement_facts(placement)[0]


def host_matrices(placement: WeightPlacement) -> dict[int | None, dict[str, int]]:
    """The matrix weights in host memory, per layer (None: the output layer's), name to bytes: with op offload
    the first GPU copies each in at the start of the split that multiplies by it and frees the copy after that
    multiplication (ggml-backend.cpp `ggml_backend_sched_split_graph`: a weight on an incompatible backend starts
    a new split, "the memory of the previously offloaded weights can be reused")."""
    return _placement_facts(placement)[1]
