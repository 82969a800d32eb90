"""A small, fully known estimator for the planner's tests: llama.cpp's placement rules (layer split, `-ngl` from
the back, `--n-cpu-moe` from the front, n_ctx padding and streams) with round per-layer sizes, so that the solver's
answers can be worked out by hand. It shares no code with the production estimator."""

from __future__ import annotations

import math

from fitplan.core.base.devices import MIB, Machine
from fitplan.core.base.launch_settings import NGL_ALL, NGL_AUTO, LaunchSettings
from fitplan.core.base.results import DeviceEstimate, Estimate, ResolvedContext, Term, TermKind
from fitplan.core.model.profile import LayerKind, LayerProfile, ModelProfile, TensorProfile, TensorRole

KIB = 1 << 10

# Model sizes used throughout (dense unless experts are given).
LAYER = 100 * MIB  # non-expert weights of one layer
OUTPUT = 300 * MIB  # output layer weights
EMBD = 200 * MIB  # token embeddings (always on the host)
KV_CELL_LAYER = 4 * KIB  # KV bytes per cell per layer
GPU_COMPUTE = 500 * MIB  # compute buffer of each GPU in use
HOST_COMPUTE = 100 * MIB


def make_profile(
    n_layer: int = 32, n_ctx_train: int = 32768, expert: int = 0, layer: int = LAYER
) -> ModelProfile:
    tensors: list[TensorProfile] = [
        TensorProfile("token_embd.weight", 1, "F16", (1,), EMBD, None, TensorRole.TOKEN_EMBD),
        TensorProfile("output.weight", 1, "F16", (1,), OUTPUT, None, TensorRole.OUTPUT),
    ]
    layers = []
    for i in range(n_layer):
        tensors.append(
            TensorProfile(f"blk.{i}.attn_q.weight", 1, "F16", (1,), layer, i, TensorRole.ATTENTION)
        )
        if expert:
            tensors.append(
                TensorProfile(f"blk.{i}.ffn_up_exps.weight", 1, "F16", (1,), expert, i, TensorRole.EXPERTS)
            )
        layers.append(LayerProfile(i, LayerKind.FULL, 8, 8, 128, 128, 0, has_kv=True, is_moe=bool(expert)))
    return ModelProfile(
        path="/m/model.gguf",
        shard_paths=("/m/model.gguf",),
        architecture="llama",
        name="test",
        file_type="F16",
        file_size=sum(t.n_bytes for t in tensors),
        n_params=0,
        n_layer=n_layer,
        n_layer_all=n_layer,
        n_nextn=0,
        n_embd=1024,
        n_vocab=1000,
        n_ctx_train=n_ctx_train,
        layers=tuple(layers),
        tensors=tuple(tensors),
    )


def _layer_devices(n_layer_all: int, ngl: int, fractions: list[float]) -> list[int | None]:
    """llama.cpp's rule: offload from the back; layer il goes to the first device whose cumulative share exceeds
    (il - i_gpu_start) / act."""
    i_gpu_start = max(n_layer_all + 1 - ngl, 0)
    act = min(ngl, n_layer_all + 1)
    out: list[int | None] = []
    for il in range(n_layer_all + 1):
        if il < i_gpu_start or not fractions:
            out.append(None)
            continue
        x = (il - i_gpu_start) / act
        out.append(next((d for d, f in enumerate(fractions) if f > x), len(fractions) - 1))
    return out


def fake_estimate(profile: ModelProfile, settings: LaunchSettings, machine: Machine) -> Estimate:
    gpus = machine.gpus
    L = profile.n_layer_all
    if not gpus:
        ngl = 0
    elif settings.n_gpu_layers in (NGL_ALL, NGL_AUTO):
        ngl = L + 1
    else:
        ngl = min(settings.n_gpu_layers, L + 1)
    shares = list(settings.tensor_split) or [float(d.free_bytes) for d in gpus]
    shares += [0.0] * (len(gpus) - len(shares))
    total = sum(shares)
    cum, acc = [], 0.0
    for s in shares:
        acc += s
        cum.append(acc / total)
    devs = _layer_devices(L, ngl, cum)
    used: list[int] = [0] * (len(gpus) + 1)  # last = host

    def at(dev: int | None) -> int:
        return len(gpus) if dev is None else dev

    for t in profile.tensors:
        if t.role is TensorRole.TOKEN_EMBD:
            used[-1] += t.n_bytes
        elif t.role is TensorRole.OUTPUT:
            used[at(devs[L])] += t.n_bytes
        elif (
            t.role is TensorRole.EXPERTS
            and t.layer is not None
            and (settings.cpu_moe or t.layer < settings.n_cpu_moe)
        ):
            used[-1] += t.n_bytes
        elif t.layer is not None:
            used[at(devs[t.layer])] += t.n_bytes
    # context: padded to 256 per stream (n_parallel auto on the server = one unified stream)
    n_ctx = settings.n_ctx or profile.n_ctx_train
    # streams: one per sequence without a unified cache (-np N), one with it or with -np auto (unified)
    streams = 1 if settings.n_parallel < 0 or settings.kv_unified else max(1, settings.n_parallel)
    n_ctx_seq = math.ceil((math.ceil(n_ctx / 256) * 256 // streams) / 256) * 256 if streams > 1 else 0
    n_ctx = n_ctx_seq * streams if streams > 1 else math.ceil(n_ctx / 256) * 256
    for il in range(L):
        used[at(devs[il])] += KV_CELL_LAYER * n_ctx
    for gi in range(len(gpus)):
        if used[gi]:
            used[gi] += GPU_COMPUTE
    used[-1] += HOST_COMPUTE
    devices = tuple(
        DeviceEstimate(d, (Term(TermKind.WEIGHTS, used[i], "fake"),))
        for i, d in enumerate((*gpus, machine.host))
    )
    ctx = ResolvedContext(n_ctx, n_ctx, 1, streams, streams == 1, 512, 512, 1, True, ngl)
    return Estimate(settings=settings, context=ctx, devices=devices)
