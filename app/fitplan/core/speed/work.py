"""What each device reads and computes per token for one placement: the speed model's inputs.

The placement is the estimator's own (`memory.weights.place_weights`), so the speed follows the same `-ngl`,
`--n-cpu-moe`, `-ot`, `-ts` and `-dev` rules as the memory. Per device:

* weights read per generated token: every weight of the layers it holds, except the routed experts (`*_exps`), of
  which a token reads `n_expert_used / n_expert` (`src/llama-graph.cpp:llm_graph_context::build_moe_ffn`: one
  `ggml_mul_mat_id` over the selected experts), and except the input embeddings, of which a token reads one row
  (`build_inp_embd`: `ggml_get_rows`);
* matrix FLOPs per token: 2 x the elements of those weights (the same expert share);
* KV cache per token of context: K and V rows of the layers whose cache it holds (`-nkvo` keeps them on the host);
* the layer boundaries where the hidden state crosses from one device to the next
  (`ggml-backend.cpp:ggml_backend_sched_split_graph` cuts the graph there and copies the input of each split), and
  the round trips to the host inside a GPU layer (`host_round_trips`): with `-nkvo` each attention layer's
  attention runs on the host (two splits per layer: 66 for llama-3.1-8b's 32 layers in the recorded reserve,
  tests/fixtures/llamacpp/finer), and a dense FFN tensor on the host (a partial layer's `-ot`) takes the FFN there;
* whether llama.cpp pipelines the micro-batches of a prompt across the GPUs (`src/llama-context.cpp`: more than one
  device, every layer and the output on a GPU, layer split, the KV cache offloaded and no tensor overrides, which
  `--n-cpu-moe` and `-ot` are; the scheduler then keeps up to 4 copies of the inputs in flight).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from fitplan.core.base.devices import Machine
from fitplan.core.base.launch_settings import LaunchSettings, SplitMode
from fitplan.core.gguf import ggml_types
from fitplan.core.memory.weights import WeightPlacement, active_gpu_positions, place_weights
from fitplan.core.model.profile import LayerKind, ModelProfile, TensorRole


@dataclass(frozen=True, slots=True)
class DeviceWork:
    """Per token, on one device (`gpu` is the position in `machine.gpus`; None is the host)."""

    gpu: int | None
    dense_bytes: float  # weights read once per token (attention, dense FFN, shared experts, norms, output)
    expert_bytes: float  # routed expert weights held here (all experts)
    dense_flops: float  # 2 x elements of the dense matrices
    expert_flops: float  # 2 x elements of all routed experts held here
    kv_bytes_per_cell: float  # K+V bytes per context cell of the layers whose cache is here
    attn_flops_per_cell: float  # 4 x heads x head size per context cell, summed over those layers
    n_layers: int  # blocks whose compute runs here
    #: the part of dense_flops / expert_flops whose weights are stored unquantized (F16, BF16, F32): llama.cpp
    #: multiplies those with a float GEMM (cuBLAS, Metal's simdgroup matrix kernels), the quantized ones with its
    #: own kernels (ggml-cuda's mmq, Metal's mul_mm on dequantized tiles), which reach a different share of peak
    dense_flops_16: float = 0.0
    expert_flops_16: float = 0.0
    #: the sliding-window layers' part of kv_bytes_per_cell / attn_flops_per_cell: a token attends to at most
    #: `swa_window` cells of them (src/llama-hparams.cpp `is_masked_swa`: cells beyond the window are masked, and
    #: with flash attention ggml-cuda's kernels skip the masked KV blocks), whatever the depth
    kv_swa_bytes_per_cell: float = 0.0
    attn_swa_flops_per_cell: float = 0.0
    swa_window: int = 0

    def kv_read(self, depth: float) -> float:
        """KV bytes one token reads at `depth` cells: every cell of the full-attention layers, at most the window
        of the sliding-window ones."""
        window = min(depth, self.swa_window) if self.swa_window > 0 else depth
        return (
            self.kv_bytes_per_cell - self.kv_swa_bytes_per_cell
        ) * depth + self.kv_swa_bytes_per_cell * window

    def attn_flops(self, depth: float) -> float:
        """Attention FLOPs of one token at `depth` cells (the window cap of `kv_read`)."""
        window = min(depth, self.swa_window) if self.swa_window > 0 else depth
        full = self.attn_flops_per_cell - self.attn_swa_flops_per_cell
        return full * depth + self.attn_swa_flops_per_cell * window

    def read_bytes(self, expert_share: float) -> float:
        """Weight bytes one generated token reads here."""
        return self.dense_bytes + self.expert_bytes * expert_share

    def matrix_flops(self, expert_share: float) -> float:
        return self.dense_flops + self.expert_flops * expert_share

    def matrix_flops_16(self, expert_share: float) -> float:
        """The unquantized part of `matrix_flops`."""
        return self.dense_flops_16 + self.expert_flops_16 * expert_share


@dataclass(frozen=True, slots=True)
class ModelWork:
    """A placement's work per token, device by device, plus what moves between devices."""

    devices: tuple[DeviceWork, ...]  # the active GPUs in order, then the host (gpu None)
    expert_share: float  # n_expert_used / n_expert (1 for a dense model)
    n_expert: int
    n_expert_used: int
    n_embd: int
    boundaries: int  # layer-to-layer device changes a token crosses (hidden state copies per token)
    n_layer: int
    pipeline: bool = False  # the GPUs work on consecutive micro-batches at once (pipeline parallelism)

    @property
    def host(self) -> DeviceWork:
        return self.devices[-1]

    @property
    def gpus(self) -> tuple[DeviceWork, ...]:
        return self.devices[:-1]


def _cache_elem_bytes(cache_type: str) -> float:
    t = ggml_types.lookup(ggml_types.type_id(cache_type))
    return t.type_size / t.block_size if t is not None else 2.0


def _kv_cell_bytes(profile: ModelProfile, il: int, settings: LaunchSettings) -> tuple[float, float]:
    """(K+V bytes per context cell, attention FLOPs per cell) of layer `il`'s own cache; 0 for none."""
    layer = profile.layers[il]
    if not layer.has_kv or layer.kind in (LayerKind.SHARED, LayerKind.NONE, LayerKind.NEXTN):
        return 0.0, 0.0
    kb, vb = _cache_elem_bytes(settings.cache_type_k), _cache_elem_bytes(settings.cache_type_v)
    if profile.mla is not None:
        k = (profile.mla.kv_lora_rank + profile.mla.n_rot) * kb
        return k, 4.0 * layer.n_head * (profile.mla.kv_lora_rank + profile.mla.n_rot)
    k = layer.n_embd_k_gqa * kb
    v = layer.n_embd_v_gqa * vb
    return k + v, 2.0 * layer.n_head * (layer.n_embd_head_k + layer.n_embd_head_v)


def _elements(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@dataclass(slots=True)
class _Sums:
    dense_bytes: float = 0.0
    expert_bytes: float = 0.0
    dense_flops: float = 0.0
    expert_flops: float = 0.0
    kv_cell: float = 0.0
    attn_cell: float = 0.0
    kv_swa_cell: float = 0.0
    attn_swa_cell: float = 0.0
    n_layers: int = 0
    dense_flops_16: float = 0.0
    expert_flops_16: float = 0.0


#: Weight types multiplied unquantized (a float GEMM rather than a quantized kernel).
FLOAT_WEIGHT_TYPES = frozenset({"F16", "BF16", "F32"})


def _add_weights(
    sums: dict[int | None, _Sums], profile: ModelProfile, placement: WeightPlacement, n_dev: int
) -> None:
    by_name = {t.name: t for t in profile.tensors}
    for tp in placement.tensors:
        src = by_name.get(tp.name)
        if src is None or (tp.role in (TensorRole.TOKEN_EMBD, TensorRole.POS_EMBD) and not tp.duplicate):
            continue  # input embeddings: one row per token (get_rows)
        acc = sums[tp.device if tp.device is not None and tp.device < n_dev else None]
        flops = 2.0 * _elements(src.shape) if tp.matrix else 0.0
        nbytes = tp.n_bytes or src.n_bytes
        unquantized = src.type_name.upper() in FLOAT_WEIGHT_TYPES
        if tp.role is TensorRole.EXPERTS:
            acc.expert_bytes += nbytes
            acc.expert_flops += flops
            acc.expert_flops_16 += flops if unquantized else 0.0
        else:
            acc.dense_bytes += nbytes
            acc.dense_flops += flops
            acc.dense_flops_16 += flops if unquantized else 0.0


def _add_kv(kv: _Sums, profile: ModelProfile, il: int, settings: LaunchSettings) -> None:
    """Layer `il`'s KV bytes and attention FLOPs per cell, on the device holding its cache; a sliding-window
    layer's also as such (`DeviceWork.kv_read` caps them at the window), unless --swa-full keeps every cell."""
    cell, attn = _kv_cell_bytes(profile, il, settings)
    kv.kv_cell += cell
    kv.attn_cell += attn
    if profile.layers[il].is_swa and profile.n_swa > 0 and not settings.swa_full:
        kv.kv_swa_cell += cell
        kv.attn_swa_cell += attn


def model_work(profile: ModelProfile, settings: LaunchSettings, machine: Machine) -> ModelWork:
    """The work per token of `profile` placed as llama.cpp places it with `settings` on `machine`."""
    placement = place_weights(profile, replace(settings, n_ctx=0), machine)
    n_dev = len(active_gpu_positions(settings, machine))
    slots: list[int | None] = [*range(n_dev), None]
    sums = {s: _Sums() for s in slots}
    _add_weights(sums, profile, placement, n_dev)
    layer_dev = placement.layer_device
    for il in range(profile.n_layer):
        dev = layer_dev[il] if il < len(layer_dev) else None
        slot = dev if dev is not None and dev < n_dev else None
        sums[slot].n_layers += 1
        _add_kv(sums[None if settings.no_kv_offload else slot], profile, il, settings)
    chain = [*(layer_dev[il] for il in range(profile.n_layer)), placement.output_device]
    boundaries = sum(1 for a, b in itertools.pairwise(chain) if a != b)
    boundaries += 2 * host_round_trips(profile, placement, settings, n_dev)
    devices = tuple(
        DeviceWork(
            s,
            a.dense_bytes,
            a.expert_bytes,
            a.dense_flops,
            a.expert_flops,
            a.kv_cell,
            a.attn_cell,
            a.n_layers,
            a.dense_flops_16,
            a.expert_flops_16,
            a.kv_swa_cell,
            a.attn_swa_cell,
            profile.n_swa if a.kv_swa_cell else 0,
        )
        for s, a in ((s, sums[s]) for s in slots)
    )
    moe = profile.moe
    n_exp = moe.n_expert if moe is not None and moe.n_expert > 0 else 0
    used = moe.n_expert_used if moe is not None and n_exp else 0
    share = used / n_exp if n_exp else 1.0
    pipeline = _pipelined(settings, n_dev, sums[None].n_layers == 0 and placement.output_device is not None)
    return ModelWork(devices, share, n_exp, used, profile.n_embd, boundaries, profile.n_layer, pipeline)


def host_round_trips(
    profile: ModelProfile, placement: WeightPlacement, settings: LaunchSettings, n_dev: int
) -> int:
    """GPU layers whose token goes to the host and back inside the layer: with -nkvo each one with a KV cache (its
    attention runs where the cache is), else each one with a dense weight (not a routed expert, whose share the
    first GPU's expert copies or the host's expert pass account for) in a host buffer."""
    on_gpu = {
        il for il, d in enumerate(placement.layer_device[: profile.n_layer]) if d is not None and d < n_dev
    }
    if settings.no_kv_offload:
        return sum(1 for il in on_gpu if _kv_cell_bytes(profile, il, settings)[0] > 0)
    hosted = {
        tp.layer
        for tp in placement.tensors
        if tp.device is None and tp.layer in on_gpu and tp.matrix and tp.role is not TensorRole.EXPERTS
    }
    return len(hosted)


def _pipelined(settings: LaunchSettings, n_dev: int, all_on_gpus: bool) -> bool:
    """llama-context.cpp's pipeline_parallel: more than one device, every layer and the output offloaded, layer
    split, the KV cache offloaded and no tensor overrides (`--n-cpu-moe` and `--cpu-moe` are overrides)."""
    return (
        n_dev > 1
        and all_on_gpus
        and settings.split_mode is SplitMode.LAYER
        and not settings.no_kv_offload
        and not settings.tensor_overrides
        and settings.n_cpu_moe == 0
        and not settings.cpu_moe
    )
