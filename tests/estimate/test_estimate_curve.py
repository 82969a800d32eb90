"""The vectorised context curve (fitplan.core.estimate.curve) equals estimate() at every context, term by term."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fitplan.core.base.devices import GIB, Device, DeviceKind, Machine, Vendor, assumed_gpu, host_device
from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import NGL_ALL, DraftSettings, Engine, FlashAttn, LaunchSettings, Tool
from fitplan.core.base.results import TERM_ORDER, TermKind
from fitplan.core.estimate.curve import estimate_curve
from fitplan.core.estimate.estimator import estimate
from fitplan.core.gguf.reader import read_header
from fitplan.core.model.builder import build_profile
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.usage import MarginPolicy
from fitplan.core.plan.verdict import judge
from support.models import TESTS, sparse

MODELS = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"
HOST = host_device(64 * GIB)
CONTEXTS = [0, 256, 700, 1024, 2048, 3000, 4096, 8192, 10000, 32768, 65536, 131072]


def _gpus(n: int, gib: float = 24) -> tuple[Device, ...]:
    return tuple(dataclasses.replace(assumed_gpu(f"GPU{i}", gib), backend_name=f"CUDA{i}") for i in range(n))


def _assert_equal(profile: ModelProfile, settings: LaunchSettings, machine: Machine, **kw: object) -> None:
    curve = estimate_curve(profile, settings, machine, CONTEXTS, **kw)  # type: ignore[arg-type]
    assert curve.bytes.shape == (len(machine.all), len(TERM_ORDER), len(CONTEXTS))
    for i, c in enumerate(CONTEXTS):
        e = estimate(profile, dataclasses.replace(settings, n_ctx=c), machine, **kw)  # type: ignore[arg-type]
        assert curve.n_ctx[i] == e.context.n_ctx
        for d, de in enumerate(e.devices):
            for k, kind in enumerate(TERM_ORDER):
                assert curve.bytes[d, k, i] == de.bytes_of(kind), (c, de.device.name, kind)


@pytest.mark.parametrize(
    ("model", "settings", "n_gpus"),
    [
        ("llama-3.1-8b", LaunchSettings(), 1),
        ("llama-3.1-8b", LaunchSettings(n_gpu_layers=20, n_parallel=3, kv_unified=False), 1),
        ("llama-3.1-8b", LaunchSettings(tool=Tool.FIT_PARAMS, cache_type_k="q8_0", cache_type_v="q8_0"), 2),
        ("gemma-3-27b", LaunchSettings(n_parallel=4, kv_unified=False), 2),
        ("gemma-3-27b", LaunchSettings(swa_full=True, no_kv_offload=True), 1),
        ("qwen3-next-80b-a3b", LaunchSettings(n_cpu_moe=10), 1),
        ("gpt-oss-20b", LaunchSettings(flash_attn=FlashAttn.OFF), 0),
        ("deepseek-v2-lite", LaunchSettings(n_gpu_layers=10), 2),
        # CUDA pads the q8_0 MLA cache's 576-wide rows: one padded row per tensor, then 128 bytes
        (
            "deepseek-v2-lite",
            LaunchSettings(
                n_gpu_layers=14, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn=FlashAttn.ON
            ),
            1,
        ),
        # experts on the host: the first GPU copies them in one at a time
        ("qwen3-30b-a3b", LaunchSettings(cpu_moe=True, n_ubatch=2048, n_batch=2048), 1),
        ("granite-4.0-h-tiny", LaunchSettings(), 1),
        ("llama-3.1-8b", LaunchSettings(n_gpu_layers=NGL_ALL), 2),  # pipeline parallelism
        (
            "deepseek-v2-lite",
            LaunchSettings(engine=Engine.IK_LLAMA, attn_max_batch_mib=256, flash_attn=FlashAttn.OFF),
            1,
        ),
        ("deepseek-v2-lite", LaunchSettings(engine=Engine.IK_LLAMA, attn_max_batch_mib=128), 0),
    ],
)
def test_curve_equals_estimate(model: str, settings: LaunchSettings, n_gpus: int) -> None:
    _assert_equal(sparse(model), settings, Machine(_gpus(n_gpus), HOST))


def test_curve_with_draft_and_rpc() -> None:
    rpc = Device("RPC0", DeviceKind.GPU, 32 * GIB, 32 * GIB, Vendor.RPC, host="10.0.0.2:50052")
    s = LaunchSettings(n_gpu_layers=NGL_ALL, draft=DraftSettings(model_path="d.gguf", n_gpu_layers=10))
    _assert_equal(sparse("qwen3-8b"), s, Machine((rpc, *_gpus(1)), HOST), draft=sparse("llama-3.1-8b"))


@pytest.mark.parametrize(
    ("model", "settings"),
    [
        ("qwen3-next-80b-a3b", LaunchSettings(n_gpu_layers=NGL_ALL, cpu_moe=True)),
        ("qwen3-next-80b-a3b", LaunchSettings(n_gpu_layers=NGL_ALL, n_cpu_moe=1)),
        ("llama-4-scout-17b-16e", LaunchSettings(n_gpu_layers=NGL_ALL, cpu_moe=True)),
    ],
)
def test_curve_with_experts_on_the_host(model: str, settings: LaunchSettings) -> None:
    # two RPC devices (no op offload): the host's experts-only buffer, the hole under the first device's mask and
    # the shared expert on the devices are all in play
    rpc = tuple(
        Device(f"RPC{i}", DeviceKind.GPU, 32 * GIB, 32 * GIB, Vendor.RPC, host=f"10.0.0.{i + 2}:50052")
        for i in range(2)
    )
    _assert_equal(sparse(model), settings, Machine(rpc, HOST))


def test_memory_grows_with_the_context() -> None:
    # the largest-context search bisects the grid (`plan.search`): it relies on every device's use growing with -c
    prof = sparse("llama-3.1-8b")
    machine = Machine(_gpus(1, 12), HOST)
    ctxs = list(range(4096, 131073, 4096))
    curve = estimate_curve(prof, LaunchSettings(n_gpu_layers=NGL_ALL), machine, ctxs)
    assert np.all(np.diff(curve.used(), axis=1) >= 0)
    kv = curve.term(0, TermKind.KV)
    assert np.all(np.diff(kv) > 0)
    # the verdict at each point: fits at 4096, not at 128K on 12 GiB, and never again once it stops
    margin = MarginPolicy()
    ok = [
        judge(estimate(prof, LaunchSettings(n_ctx=c, n_gpu_layers=NGL_ALL), machine), machine, margin).fits
        for c in ctxs
    ]
    assert ok[0] and not ok[-1]
    assert ok == sorted(ok, reverse=True)


def test_bad_contexts() -> None:
    prof = sparse("llama-3.1-8b")
    with pytest.raises(SettingsError):
        estimate_curve(prof, LaunchSettings(), Machine((), HOST), [])
    with pytest.raises(SettingsError):
        estimate_curve(prof, LaunchSettings(), Machine((), HOST), [-5])


@pytest.mark.parametrize(
    ("model", "settings", "n_gpus"),
    [
        # Kimi's concatenation peak without flash attention is counted net of the later copy of V
        ("kimi-linear-moe", LaunchSettings(flash_attn=FlashAttn.OFF), 1),
        ("kimi-k3-moe", LaunchSettings(), 0),
        ("dots3note-moe", LaunchSettings(flash_attn=FlashAttn.OFF), 1),  # the DSA indexer's freed query space
        ("talkie-dense", LaunchSettings(), 1),
    ],
)
def test_curve_equals_estimate_on_smoke_models(model: str, settings: LaunchSettings, n_gpus: int) -> None:
    p = build_profile(read_header(MODELS.parent / "archs" / f"{model}.header.gguf", allow_incomplete=True))
    _assert_equal(p, settings, Machine(_gpus(n_gpus), HOST))
