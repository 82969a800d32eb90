"""The window's facade over the core, without a window: loading, pairing, curves, verdicts, command lines."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fitplan.core.base.devices import GIB, MIB, Device, DeviceKind, Machine, Vendor, host_device
from fitplan.core.base.errors import IncompleteModelError, SettingsError
from fitplan.core.base.launch_settings import FlashAttn, LaunchSettings, MmprojPlacement
from fitplan.core.base.results import TERM_ORDER, TermKind
from fitplan.gui.backend import Backend, PlanRequest, VerdictLevel, layer_makeup

from .conftest import DEEPSEEK, GEMMA, LLAMA, QWEN_MOE

BASE = LaunchSettings(n_ctx=32768, n_parallel=1, kv_unified=False, fit=False)


def gpu(name: str, gib: float) -> Device:
    return Device(name, DeviceKind.GPU, int(gib * GIB), int(gib * GIB), Vendor.NVIDIA)


def machine(*gpus: Device, host_gib: float = 64) -> Machine:
    return Machine(gpus, host_device(int(host_gib * GIB)))


@pytest.fixture(scope="module")
def backend() -> Backend:
    return Backend(probe=lambda: pytest.fail("no probing in these tests"))


@pytest.mark.parametrize(
    ("path", "makeup"),
    [
        (LLAMA, "32 layers: 32 full attention"),
        (QWEN_MOE, "48 layers: 48 full attention; 128 experts, 8 used per token"),
        # gemma3: every 6th layer (il % 6 == 5) is global, the rest use the 1024-token window.
        (GEMMA, "48 layers: 40 sliding-window attention, 8 full attention"),
        (DEEPSEEK, "27 layers: 27 latent attention (MLA); 64 experts, 6 used per token"),
    ],
)
def test_examples_load_and_read_as_published(backend: Backend, path: Path, makeup: str) -> None:
    model = backend.load(str(path))
    assert layer_makeup(model.profile) == makeup
    assert model.warnings == ()


def test_projector_pairs_only_with_a_model_of_its_width(backend: Backend) -> None:
    gemma = backend.load(str(GEMMA))
    assert gemma.mmproj is not None and gemma.mmproj.is_mmproj
    llama = backend.load(str(LLAMA))
    assert llama.mmproj is None
    # The gemma projector (3840 wide) lies in the same folder as the 4096-wide Llama.
    assert "3840-wide" in llama.mmproj_note and "4096 wide" in llama.mmproj_note


def test_interrupted_download_is_still_an_error(backend: Backend, tmp_path: Path) -> None:
    partial = tmp_path / "partial.gguf"
    partial.write_bytes(LLAMA.read_bytes().replace(b"fitplan.header_only", b"fitplan.header_xxxx"))
    with pytest.raises(IncompleteModelError):
        backend.load(str(partial))


def test_curve_matches_the_estimate_at_its_contexts(backend: Backend) -> None:
    model = backend.load(str(GEMMA))
    m = machine(gpu("RTX 4090", 24))
    settings = replace(BASE, mmproj_path=model.mmproj.path if model.mmproj else None)
    curve = backend.curve(model, settings, m)
    assert list(curve.contexts) == sorted(set(curve.contexts)) and all(c % 256 == 0 for c in curve.contexts)
    for i in (0, len(curve.contexts) // 2, len(curve.contexts) - 1):
        est = backend.estimate(model, replace(settings, n_ctx=int(curve.contexts[i])), m)
        for d, dev in enumerate(est.devices):
            for t, kind in enumerate(TERM_ORDER):
                assert curve.bytes[d, t, i] == dev.bytes_of(kind), (i, dev.device.name, kind)


def test_curve_is_reused_while_only_the_context_changes(backend: Backend) -> None:
    model = backend.load(str(LLAMA))
    m = machine(gpu("RTX 4090", 24))
    first = backend.curve(model, BASE, m)
    assert backend.curve(model, replace(BASE, n_ctx=8192), m) is first
    assert backend.curve(model, replace(BASE, cache_type_k="q8_0"), m) is not first


def test_verdicts(backend: Backend) -> None:
    llama = backend.load(str(LLAMA))
    fits = backend.plan(PlanRequest(1, llama, BASE, machine(gpu("RTX 4090", 24))))
    assert fits.verdict.level == VerdictLevel.FITS
    assert fits.verdict.text.startswith("Fits:") and "RTX 4090" in fits.verdict.text
    assert fits.max_context >= 32768 and fits.max_context % 256 == 0

    qwen = backend.load(str(QWEN_MOE))
    partial = backend.plan(PlanRequest(2, qwen, BASE, machine(gpu("RTX 4070", 12))))
    assert partial.verdict.level == VerdictLevel.OFFLOAD
    assert "--n-cpu-moe" in partial.args
    assert partial.plan_settings is not None and partial.plan_settings.n_cpu_moe > 0

    none = backend.plan(PlanRequest(3, qwen, BASE, machine(gpu("RTX 3050", 8), host_gib=8)))
    assert none.verdict.level == VerdictLevel.NO_FIT
    assert none.verdict.text.startswith("Does not fit") and none.max_context == 0


def test_projector_not_loaded_is_out_of_the_estimate(backend: Backend) -> None:
    gemma = backend.load(str(GEMMA))
    assert gemma.mmproj is not None
    m = machine(gpu("RTX 4090", 24))
    on = backend.estimate(gemma, replace(BASE, mmproj_path=gemma.mmproj.path), m)
    off = backend.estimate(
        gemma, replace(BASE, mmproj_path=gemma.mmproj.path, mmproj=MmprojPlacement.NONE), m
    )
    assert on.devices[0].bytes_of(TermKind.MMPROJ) >= gemma.mmproj.weight_bytes
    assert all(d.bytes_of(TermKind.MMPROJ) == 0 for d in off.devices)


def test_quantized_v_without_flash_attention_is_refused(backend: Backend) -> None:
    llama = backend.load(str(LLAMA))
    with pytest.raises(SettingsError, match="flash attention"):
        backend.estimate(llama, replace(BASE, cache_type_v="q8_0", flash_attn=FlashAttn.OFF), machine())


def test_hostile_header_gives_a_clear_error(tmp_path: Path) -> None:
    from fitplan.core.base.errors import GGUFError

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (1 << 62).to_bytes(8, "little") + bytes(8))
    with pytest.raises(GGUFError) as caught:
        Backend().load(str(bad))
    assert "bad.gguf" in str(caught.value)


def test_curve_contexts_are_log_spaced_multiples_of_256() -> None:
    grid = Backend.curve_contexts(131072)
    assert grid[0] == 256 and grid[-1] == 131072
    assert np.all(grid % 256 == 0) and np.all(np.diff(grid) > 0)


def test_the_crashing_binding_release_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import PySide6

    from fitplan.gui.app import known_binding_problem

    monkeypatch.setattr(PySide6, "__version__", "6.12.0")
    monkeypatch.setattr(sys, "version_info", (3, 11, 7, "final", 0))
    problem = known_binding_problem()
    assert problem is not None and "PySide6-Essentials<6.12" in problem
    monkeypatch.setattr(sys, "version_info", (3, 12, 1, "final", 0))
    assert known_binding_problem() is None
    monkeypatch.setattr(sys, "version_info", (3, 11, 7, "final", 0))
    monkeypatch.setattr(PySide6, "__version__", "6.11.3")
    assert known_binding_problem() is None


def test_kv_cache_of_the_8b_example_is_the_measured_4096_mib(backend: Backend) -> None:
    llama = backend.load(str(LLAMA))
    est = backend.estimate(llama, BASE, machine(gpu("RTX 4090", 24)))
    # src/llama-kv-cache.cpp, verified with llama.cpp: 32 layers x 32768 cells x (8 x 128) x 2 (K, V)
    # x 2 bytes (f16) = 4096 MiB.
    assert sum(d.bytes_of(TermKind.KV) for d in est.devices) == 32 * 32768 * 8 * 128 * 2 * 2 == 4096 * MIB


def test_command_line_for_the_plan(backend: Backend) -> None:
    llama = backend.load(str(LLAMA))
    out = backend.plan(PlanRequest(1, llama, BASE, machine(gpu("RTX 4090", 24))))
    assert out.args[:3] == ("llama-server", "-m", str(LLAMA))
    assert out.args[out.args.index("-c") + 1] == "32768"
    text = backend.render_command(out.args, "sh")
    assert text.startswith("llama-server \\\n  -m ")


def test_a_unified_gpu_plan_says_what_host_ram_it_takes(backend: Backend) -> None:
    """The window shows the same shared-memory note as `fitplan plan` (core/plan/pool.py memory_notes)."""
    llama = backend.load(str(LLAMA))
    spark = Device(
        "GB10",
        DeviceKind.GPU,
        100 * GIB,
        100 * GIB,
        Vendor.NVIDIA,
        unified_memory=True,
        host_shared_bytes=100 * GIB,
    )
    out = backend.plan(PlanRequest(1, llama, BASE, Machine((spark,), host_device(100 * GIB))))
    assert out.verdict.level == VerdictLevel.FITS
    assert any("of host RAM" in n and "one pool" in n for n in out.notes)
    discrete = backend.plan(PlanRequest(2, llama, BASE, machine(gpu("RTX 4090", 24))))
    assert not any("of host RAM" in n for n in discrete.notes)


def test_catalog_offers_each_gpu_with_the_memory_its_rule_gives() -> None:
    """The window's catalog and `--assume-gpu` agree (`CatalogGpu.assumed`): each choice is a spec the core reads
    to the catalog's rule: the Arc A770 16 GB with what SYCL reports, a Strix Halo with its carve-out and GTT (the
    GTT part host RAM), a GB10 all host RAM, a Mac with its Metal working set."""
    from fitplan.core.hardware import parse_assumed_gpu

    specs = {c.spec: parse_assumed_gpu(c.spec) for _title, choices in Backend.catalog() for c in choices}
    arc, strix = specs["Arc A770 16GB"], specs["Radeon 8060S 128GB"]
    gb10, mac = specs["GB10"], specs["Apple M2 Max 64GB"]
    assert arc.memory_bytes == parse_assumed_gpu("Arc A770 16GB").memory_bytes == 16225243136
    assert arc.shared_bytes == 0
    assert 0 < strix.shared_bytes < strix.memory_bytes  # the GTT part, not the carve-out
    assert strix.memory_bytes == parse_assumed_gpu("Strix Halo 128GB").memory_bytes
    assert gb10.shared_bytes == gb10.memory_bytes == parse_assumed_gpu("DGX Spark").memory_bytes
    assert mac.memory_bytes == parse_assumed_gpu("M2 Max 64GB").memory_bytes < 64 * GIB
