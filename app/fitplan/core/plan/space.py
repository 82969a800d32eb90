"""The placement space a plan searches: -ngl, --n-cpu-moe and the per-GPU layer split, and what each point costs.

A point is (ngl, ncmoe, split): `ngl` offloaded layer indices (0..L+1, the output layer first, as llama.cpp offloads
from the back), the expert tensors of the first `ncmoe` layers on the CPU (0..the last MoE layer + 1), and for
several GPUs the offloaded layers each GPU takes (`-ts` as layer counts, every composition of the offloaded count).

Finer than whole layers (`Finer`, one GPU or a pinned -ts, tried only where whole layers leave some on the CPU):

* the partial layer of a dense model: the first offloaded layer's FFN tensors on the host, as common/fit.cpp's
  `get_overflow_pattern` names them (`FFN_FRACTION_PATTERNS`: ffn_down first, then ffn_gate, then ffn_up; the
  layer's attention and its cache stay on the GPU), written as one `-ot "blk\\.K\\.ffn_down.*=CPU"`;
* `-nkvo`: every layer's KV cache (and the attention over it) in host memory, the weights where -ngl puts them.

The objective counts a partial layer as a layer on the GPU with its moved FFN bytes off the GPUs, and -nkvo as its
cache's bytes off the GPUs, in whole layers' worth (`PlacementSpace.key_layers`: a layer on the CPU costs each token
its weights and its share of the cache, -nkvo the whole cache).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from fitplan.core.base.launch_settings import TensorOverride
from fitplan.core.model.profile import ModelProfile, TensorRole

__all__ = [
    "FFN_FRACTION_PATTERNS",
    "Finer",
    "Placement",
    "PlacementSpace",
    "compositions",
    "cpu_experts_words",
    "describe_placement",
    "proportional_split",
]


#: common/fit.cpp `get_overflow_pattern`: the tensors of the partial layer `il` that go to the host, by how much of
#: its FFN leaves the GPU: 1 ffn_down (LAYER_FRACTION_GATE: gate and up stay), 2 with ffn_gate (LAYER_FRACTION_UP),
#: 3 the whole FFN (LAYER_FRACTION_ATTN: the attention alone stays)
FFN_FRACTION_PATTERNS = {
    1: r"blk\.{il}\.ffn_down.*",
    2: r"blk\.{il}\.ffn_(gate|gate_up|down).*",
    3: r"blk\.{il}\.ffn_(gate|up|gate_up|down).*",
}
#: the same in words
FFN_FRACTION_WORDS = {1: "ffn_down", 2: "ffn_down+gate", 3: "the FFN"}


@dataclass(frozen=True, slots=True)
class Finer:
    """What a placement moves besides whole layers and experts: the first offloaded layer's FFN tensors
    (`FFN_FRACTION_PATTERNS`) and the KV cache (-nkvo), both to host memory."""

    ffn_cpu: int = 0  # 0, or 1..3: how much of the first offloaded layer's FFN is on the host
    no_kv_offload: bool = False  # -nkvo
    #: with -nkvo: the cache's bytes in host memory at the context floor (what the objective counts)
    kv_bytes: int = 0

    def overrides(self, space: PlacementSpace, ngl: int) -> tuple[TensorOverride, ...]:
        """The -ot entry of the partial layer (none without one)."""
        if not self.ffn_cpu:
            return ()
        il = space.first_gpu_layer(ngl)
        return (TensorOverride(FFN_FRACTION_PATTERNS[self.ffn_cpu].format(il=il), "CPU"),)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the weights go, in llama-server terms, plus the same in words."""

    n_gpu_layers: int  # offloaded layer indices, output layer included (0..n_layer_all+1)
    n_cpu_moe: int  # --n-cpu-moe N
    tensor_split: tuple[int, ...]  # layers per GPU (empty: one GPU or none)
    cpu_layers: int  # trunk layers entirely on the CPU
    cpu_expert_layers: int  # MoE layers whose experts are on the CPU (among the GPU layers)
    description: str
    off_gpu_bytes: int = 0  # weight bytes the placement keeps off the GPUs (`PlacementSpace.off_gpu_bytes`)
    finer: Finer = Finer()  # the partial layer and -nkvo, when the plan chose them
    key_layers: int = -1  # the layers the objective counts (`PlacementSpace.key_layers`); -1: n_gpu_layers

    @property
    def objective_layers(self) -> int:
        return self.n_gpu_layers if self.key_layers < 0 else self.key_layers


class PlacementSpace:
    """Per layer index (0..L-1 blocks, L the output layer): the weight bytes it holds and its expert bytes."""

    def __init__(self, profile: ModelProfile) -> None:
        self.profile = profile
        self.L = profile.n_layer_all
        layer_bytes = [0] * (self.L + 1)
        expert_bytes = [0] * (self.L + 1)
        skipped = {lp.index for lp in profile.layers if lp.is_nextn}
        for t in profile.tensors:
            if t.role in (TensorRole.TOKEN_EMBD, TensorRole.POS_EMBD):
                continue  # input tensors are always on the CPU
            if t.layer is not None and (t.layer in skipped or t.layer >= profile.n_layer):
                continue  # NextN / MTP blocks are not loaded
            li = t.layer if t.layer is not None and t.layer < self.L else self.L
            layer_bytes[li] += t.n_bytes
            if t.role is TensorRole.EXPERTS:
                expert_bytes[li] += t.n_bytes
        self.layer_bytes = tuple(layer_bytes)
        self.expert_bytes = tuple(expert_bytes)
        self.moe_flags = _moe_layer_flags(profile)
        self.moe_layers = tuple(i for i, f in enumerate(self.moe_flags) if f)
        self._partial: dict[tuple[int, int], int] = {}

    @property
    def is_moe(self) -> bool:
        return bool(self.moe_layers)

    @property
    def max_ncmoe(self) -> int:
        """--n-cpu-moe beyond which nothing more moves: the last MoE layer + 1 (0 for a dense model)."""
        return self.moe_layers[-1] + 1 if self.moe_layers else 0

    def first_gpu_layer(self, ngl: int) -> int:
        return max(0, self.L + 1 - min(ngl, self.L + 1))

    def off_gpu_bytes(self, ngl: int, ncmoe: int, finer: Finer | None = None) -> int:
        """Weight bytes off the GPUs (tensor bytes as the file stores them, input embeddings excluded): the layers
        below the first offloaded index, then the experts of the offloaded layers among the first `ncmoe`; with
        `finer`, the partial layer's FFN tensors on the host and the host's KV bytes at the floor (-nkvo)."""
        first = self.first_gpu_layer(ngl)
        off = sum(self.layer_bytes[:first])
        off += sum(self.expert_bytes[first : max(first, min(ncmoe, self.L))])
        if finer is not None:
            off += self.partial_bytes(first, finer.ffn_cpu) + (finer.kv_bytes if finer.no_kv_offload else 0)
        return off

    def partial_bytes(self, il: int, ffn_cpu: int) -> int:
        """The bytes of layer `il`'s tensors that `FFN_FRACTION_PATTERNS[ffn_cpu]` moves to the host (0 for none)."""
        if not ffn_cpu or not 0 <= il < self.L:
            return 0
        hit = self._partial.get((il, ffn_cpu))
        if hit is None:
            rx = re.compile(FFN_FRACTION_PATTERNS[ffn_cpu].format(il=il))
            hit = sum(t.n_bytes for t in self.profile.tensors if t.layer == il and rx.search(t.name))
            self._partial[(il, ffn_cpu)] = hit
        return hit

    def partial_ok(self, ngl: int) -> bool:
        """Whether -ngl `ngl` can have a partial layer: a dense model whose first offloaded index is a block with
        FFN tensors to move (not the output layer)."""
        first = self.first_gpu_layer(ngl)
        return not self.is_moe and ngl >= 2 and first < self.L and self.partial_bytes(first, 1) > 0

    def key_layers(self, ngl: int, finer: Finer | None = None) -> int:
        """The offloaded layers the objective counts: `ngl`, less, with -nkvo, the whole layers its cache in host
        memory is worth. A layer on the CPU costs each token its weights and its share of the cache; -nkvo costs
        the whole cache: kv / (W/L + kv/L) layers, rounded up (W the blocks' weight bytes, L the blocks)."""
        act = min(ngl, self.L + 1)
        if finer is None or not finer.no_kv_offload or finer.kv_bytes <= 0:
            return act
        blocks = sum(self.layer_bytes[: self.L])
        return max(0, act - math.ceil(self.L * finer.kv_bytes / max(1, blocks + finer.kv_bytes)))


def _moe_layer_flags(profile: ModelProfile) -> tuple[bool, ...]:
    """Per trunk layer: does it hold routed expert tensors (what --n-cpu-moe moves)?"""
    has = [False] * profile.n_layer_all
    for t in profile.tensors:
        if t.role is TensorRole.EXPERTS and t.layer is not None and 0 <= t.layer < profile.n_layer_all:
            has[t.layer] = True
    if not any(has):
        for layer in profile.layers:
            if layer.is_moe and 0 <= layer.index < profile.n_layer_all:
                has[layer.index] = True
    return tuple(has)


def proportional_split(n_layers: int, capacities: Sequence[int]) -> tuple[int, ...]:
    """`n_layers` offloaded indices split in proportion to each GPU's capacity (largest remainder)."""
    caps = [max(0, c) for c in capacities]
    total = sum(caps)
    if total <= 0:
        caps = [1] * len(caps)
        total = len(caps)
    exact = [n_layers * c / total for c in caps]
    counts = [int(x) for x in exact]
    rest = n_layers - sum(counts)
    order = sorted(range(len(caps)), key=lambda i: (exact[i] - counts[i], caps[i]), reverse=True)
    for i in order[:rest]:
        counts[i] += 1
    return tuple(counts)


def compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every way to give `total` layers to `parts` GPUs in order (zeros allowed)."""
    if parts == 1:
        yield (total,)
        return
    for first in range(total, -1, -1):
        for rest in compositions(total - first, parts - 1):
            yield (first, *rest)


def cpu_experts_words(space: PlacementSpace, ncmoe: int, cpu_layers: int, cpu_expert_layers: int) -> str:
    """--n-cpu-moe N in words that agree with the flag: "N expert layers on CPU" when each of the first N layers
    is a MoE layer on the GPU side, else the N layers the flag names and how many MoE layers of them it moves
    (a model whose MoE layers alternate with dense ones, layers already on the CPU), or all of them."""
    n = min(ncmoe, space.L)
    s = "s" if cpu_expert_layers != 1 else ""
    if cpu_layers == 0 and cpu_expert_layers == n:
        return f"{n} expert layer{s} on CPU"
    if ncmoe >= space.max_ncmoe:
        return "all experts on CPU"
    which = f"{cpu_expert_layers} MoE layer{s}" + (" on the GPU side" if cpu_layers else "")
    return f"the experts of the first {n} layers on CPU ({which})"


def describe_placement(
    space: PlacementSpace,
    ngl: int,
    ncmoe: int,
    split: tuple[int, ...],
    n_gpus: int,
    finer: Finer | None = None,
) -> Placement:
    profile = space.profile
    L = space.L
    act = min(ngl, L + 1) if n_gpus else 0
    finer = finer if finer is not None and n_gpus else Finer()
    cpu_layers = min(profile.n_layer, max(0, L + 1 - act))
    cpu_expert_layers = sum(1 for i in range(min(ncmoe, L)) if space.moe_flags[i] and i >= cpu_layers)
    parts: list[str] = []
    if n_gpus == 0:
        parts.append("everything on the CPU (no GPU)")
    elif act >= L + 1 and cpu_expert_layers == 0 and not finer.ffn_cpu:
        parts.append("all layers on the GPU" + ("s" if n_gpus > 1 else ""))
    else:
        if cpu_expert_layers:
            parts.append(cpu_experts_words(space, ncmoe, cpu_layers, cpu_expert_layers))
        if finer.ffn_cpu:
            parts.append(f"{FFN_FRACTION_WORDS[finer.ffn_cpu]} of layer {space.first_gpu_layer(act)} on CPU")
        if cpu_layers:
            parts.append(f"{cpu_layers} of {profile.n_layer} layers on CPU")
        if act == 0:
            parts.append("nothing offloaded")
    if finer.no_kv_offload:
        parts.append("KV cache on the host (-nkvo)")
    if len(split) > 1:
        parts.append("split " + ":".join(str(x) for x in split) + " layers across GPUs")
    return Placement(
        n_gpu_layers=act,
        n_cpu_moe=ncmoe,
        tensor_split=split,
        cpu_layers=cpu_layers if n_gpus else profile.n_layer,
        cpu_expert_layers=cpu_expert_layers,
        description=", ".join(parts),
        off_gpu_bytes=space.off_gpu_bytes(act, ncmoe, finer),
        finer=finer,
        key_layers=space.key_layers(act, finer),
    )
