"""fitplan.core.estimate.accuracy: the configuration class of an estimate and the measured error band it shows."""

from __future__ import annotations

import json

import pytest

from fitplan.core.base.devices import GIB, Machine, Vendor, assumed_gpu, host_device
from fitplan.core.base.launch_settings import Engine
from fitplan.core.base.results import Estimate
from fitplan.core.estimate.accuracy import (
    AccuracyData,
    BandScope,
    ConfigClass,
    accuracy_band,
    configuration_class,
    load_accuracy_data,
)
from fitplan.core.estimate.estimator import estimate
from fitplan.core.launch.flags import parse_flags
from fitplan.core.model.profile import ModelProfile
from support.models import sparse

HOST = host_device(128 * GIB)
ONE_GPU = Machine((assumed_gpu("GPU0", 80),), HOST)
TWO_GPUS = Machine((assumed_gpu("GPU0", 80), assumed_gpu("GPU1", 80)), HOST)
NO_GPU = Machine((), HOST)


def _est(profile: ModelProfile, machine: Machine, *flags: str, engine: Engine | None = None) -> Estimate:
    return estimate(profile, parse_flags(["-c", "4096", "-np", "1", *flags], engine=engine).settings, machine)


@pytest.mark.parametrize(
    ("machine", "flags", "expected"),
    [
        (NO_GPU, ("-fa", "on"), ConfigClass(flash_attn=True, quantized_cache=False, split=False)),
        (NO_GPU, ("-fa", "off"), ConfigClass(flash_attn=False, quantized_cache=False, split=False)),
        (ONE_GPU, ("-fa", "on", "-ngl", "all"), ConfigClass(True, False, False)),
        (ONE_GPU, ("-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"), ConfigClass(True, True, False)),
        (ONE_GPU, ("-fa", "on", "-ctk", "q4_0"), ConfigClass(True, True, False)),  # K alone quantized
        (ONE_GPU, ("-fa", "on", "-ctk", "bf16", "-ctv", "f32"), ConfigClass(True, False, False)),
        (ONE_GPU, ("-fa", "on", "-ngl", "10"), ConfigClass(True, False, True)),  # layers on the host too
        (ONE_GPU, ("-fa", "on", "-ngl", "0"), ConfigClass(True, False, False)),  # everything on the host
        (ONE_GPU, ("-fa", "on", "--cpu-moe"), ConfigClass(True, False, True)),  # experts on the host
        (ONE_GPU, ("-fa", "on", "-nkvo"), ConfigClass(True, False, True)),  # the cache on the host
        (TWO_GPUS, ("-fa", "on", "-ngl", "all"), ConfigClass(True, False, True)),
        (TWO_GPUS, ("-fa", "on", "-sm", "none"), ConfigClass(True, False, False)),  # one of the two GPUs
    ],
)
def test_configuration_class(machine: Machine, flags: tuple[str, ...], expected: ConfigClass) -> None:
    est = _est(sparse("qwen3-30b-a3b"), machine, *flags)
    assert configuration_class(sparse("qwen3-30b-a3b"), est) == expected


def test_class_follows_the_resolved_flash_attention() -> None:
    """`-fa auto` is classed by what llama.cpp resolves it to, like the recordings."""
    p = sparse("llama-3.1-8b")
    est = _est(p, ONE_GPU)
    assert configuration_class(p, est).flash_attn is est.context.flash_attn


def test_class_keys_and_labels_are_distinct() -> None:
    classes = [ConfigClass(fa, q, s) for fa in (True, False) for q in (True, False) for s in (True, False)]
    assert len({c.key for c in classes}) == len({c.label for c in classes}) == 8
    assert ConfigClass(True, False, False).label == "flash attention on, f16 cache, one device"


def test_packaged_data_uses_only_class_keys() -> None:
    keys = {ConfigClass(fa, q, s).key for fa in (True, False) for q in (True, False) for s in (True, False)}
    data = load_accuracy_data()
    mainline = data.engines[Engine.LLAMA_CPP.value]
    assert mainline.architectures and mainline.all_architectures
    for e in data.engines.values():
        for classes in (*e.architectures.values(), e.all_architectures):
            assert set(classes) <= keys


def _data() -> AccuracyData:
    """A small data file: llama recorded with flash attention on, one device; a fork recorded on deepseek2."""
    fig = {"cases": 3, "compute_min_pct": -1.5, "compute_max_pct": 2.0, "kv_exact": 3, "weights_exact": 2}
    every = {
        "cases": 40,
        "compute_min_pct": -9.0,
        "compute_max_pct": 4.0,
        "kv_exact": 40,
        "weights_exact": 40,
    }
    doc = {
        "engines": {
            "llama.cpp": {
                "measurement": "test recordings",
                "architectures": {"llama": {"fa-on/kv-f16/one-device": fig}, "deepseek2": {}},
                "all": {"fa-on/kv-f16/one-device": every, "fa-on/kv-quantized/one-device": every},
            },
            "ik_llama.cpp": {
                "measurement": "fork recordings",
                "architectures": {"deepseek2": {"fa-on/kv-f16/one-device": {**fig, "weights_exact": None}}},
            },
            "beellama": {"note": "published figures only"},
        }
    }
    return AccuracyData.from_json(json.dumps(doc))


def test_band_of_a_recorded_architecture_and_class() -> None:
    p = sparse("llama-3.1-8b")
    band = accuracy_band(p, _est(p, NO_GPU, "-fa", "on"), _data())
    assert band.scope is BandScope.ARCHITECTURE and band.figures is not None and band.figures.cases == 3
    assert band.text == (
        "compute: within -1.5%..+2.0% on 3 recorded configurations of llama "
        "(flash attention on, f16 cache, one device); weights exact on 2, K/V on 3 of 3"
    )
    assert "test recordings" in band.tooltip


def test_band_across_all_architectures_when_this_class_is_not_recorded() -> None:
    p = sparse("llama-3.1-8b")
    band = accuracy_band(p, _est(p, NO_GPU, "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"), _data())
    assert band.scope is BandScope.ALL
    assert band.text.startswith(
        "compute: no recordings of llama with flash attention on, quantized cache, one device; "
        "across all architectures (flash attention on, quantized cache, one device): within -9.0%..+4.0% on 40"
    )


def test_band_across_all_architectures_for_an_unrecorded_architecture() -> None:
    p = sparse("qwen3-8b")
    band = accuracy_band(p, _est(p, NO_GPU, "-fa", "on"), _data())
    assert band.scope is BandScope.ALL
    assert band.text.startswith("compute: no recordings of this architecture; across all architectures")


def test_no_band_for_a_class_nothing_was_recorded_in() -> None:
    p = sparse("llama-3.1-8b")
    band = accuracy_band(p, _est(p, NO_GPU, "-fa", "off"), _data())
    assert band.scope is BandScope.NONE and band.figures is None
    assert (
        band.text
        == "compute: no recordings of any architecture with flash attention off, f16 cache, one device"
    )


def test_a_fork_never_gets_llama_cpps_band() -> None:
    """llama recorded on llama.cpp only: ik_llama.cpp's estimate of it has no band, and says why."""
    p = sparse("llama-3.1-8b")
    band = accuracy_band(p, _est(p, NO_GPU, "-fa", "on", engine=Engine.IK_LLAMA), _data())
    assert band.scope is BandScope.NONE and band.figures is None
    assert (
        band.text
        == "compute: no recordings of llama on ik_llama.cpp; llama.cpp's band is not claimed for a fork"
    )
    assert "fork" in band.tooltip


def test_a_forks_own_recordings() -> None:
    p = sparse("deepseek-v2-lite")
    band = accuracy_band(p, _est(p, NO_GPU, "-fa", "on", engine=Engine.IK_LLAMA), _data())
    assert band.scope is BandScope.ARCHITECTURE and band.measurement == "fork recordings"
    assert band.text == (
        "compute: within -1.5%..+2.0% on 3 recorded configurations of deepseek2 on ik_llama.cpp "
        "(flash attention on, f16 cache, one device); K/V exact on all (weights not recorded)"
    )


@pytest.mark.parametrize("engine", [Engine.BEELLAMA, Engine.OLLAMA])
def test_forks_without_recordings_say_so(engine: Engine) -> None:
    p = sparse("llama-3.1-8b")
    band = accuracy_band(p, _est(p, NO_GPU, engine=engine), _data())
    assert band.scope is BandScope.NONE
    assert band.text.startswith(f"compute: no error band recorded for {engine.value}; ")
    packaged = accuracy_band(p, _est(p, NO_GPU, engine=engine))
    assert packaged.figures is None and packaged.note


def _with_cuda() -> AccuracyData:
    """A small data file with a CUDA backend whose llama figures differ from the CPU's."""
    fig = {"cases": 5, "compute_min_pct": -0.5, "compute_max_pct": 4.5, "kv_exact": 5, "weights_exact": 5}
    doc = {
        "engines": {
            "llama.cpp": {
                "measurement": "test recordings",
                "architectures": {"llama": {"fa-on/kv-f16/one-device": {**fig, "cases": 3}}},
                "all": {},
                "backends": {
                    "cuda": {
                        "measurement": "stand-in recordings",
                        "architectures": {"llama": {"fa-on/kv-f16/one-device": fig}},
                        "all": {},
                    }
                },
            }
        }
    }
    return AccuracyData.from_json(json.dumps(doc))


def test_a_cuda_plan_gets_the_stand_ins_band_and_others_the_cpu_band() -> None:
    p = sparse("llama-3.1-8b")
    data = _with_cuda()
    cuda = accuracy_band(p, _est(p, ONE_GPU, "-fa", "on", "-ngl", "all"), data)
    assert cuda.figures is not None and cuda.figures.cases == 5
    assert cuda.text.startswith(
        "compute: within -0.5%..+4.5% on 5 recorded configurations of llama on CUDA/ROCm"
    )
    assert "stand-in recordings" in cuda.tooltip
    # everything on the host: the CPU recordings' band
    host = accuracy_band(p, _est(p, NO_GPU, "-fa", "on"), data)
    assert host.figures is not None and host.figures.cases == 3 and "CUDA" not in host.text
    # a GPU of unknown make is planned with ggml-cuda's rules: the stand-ins' band too
    generic = Machine((assumed_gpu("24 GiB GPU", 24, Vendor.GENERIC),), HOST)
    unknown = accuracy_band(p, _est(p, generic, "-fa", "on", "-ngl", "all"), data)
    assert unknown.figures is not None and unknown.figures.cases == 5
    # an Apple GPU is not ggml-cuda: the CPU recordings stand for it
    apple = Machine((assumed_gpu("M2", 64, Vendor.APPLE),), HOST)
    other = accuracy_band(p, _est(p, apple, "-fa", "on", "-ngl", "all"), data)
    assert other.figures is not None and other.figures.cases == 3


def _with_backends() -> AccuracyData:
    """A data file with CPU, Vulkan and Metal figures for llama that differ in their case counts."""

    def fig(n: int) -> dict[str, object]:
        return {
            "cases": n,
            "compute_min_pct": -1.0,
            "compute_max_pct": 1.0,
            "kv_exact": n,
            "weights_exact": n,
        }

    def backend(n: int) -> dict[str, object]:
        return {
            "measurement": f"{n} stand-in recordings",
            "architectures": {"llama": {"fa-on/kv-f16/one-device": fig(n)}},
            "all": {},
        }

    doc = {
        "engines": {
            "llama.cpp": {
                "measurement": "test recordings",
                "architectures": {"llama": {"fa-on/kv-f16/one-device": fig(3)}},
                "all": {},
                "backends": {"vulkan": backend(7), "metal": backend(9)},
            }
        }
    }
    return AccuracyData.from_json(json.dumps(doc))


def test_vulkan_and_metal_plans_get_their_stand_ins_band() -> None:
    """An Apple GPU is planned with ggml-metal's rules and an Intel GPU with ggml-vulkan's: each gets its
    stand-in recordings' band where the data file has one, else the CPU recordings' band without naming a
    backend (a CUDA plan here: the data file has no CUDA figures)."""
    p = sparse("llama-3.1-8b")
    data = _with_backends()
    apple = Machine((assumed_gpu("M2", 64, Vendor.APPLE),), HOST)
    metal = accuracy_band(p, _est(p, apple, "-fa", "on", "-ngl", "all"), data)
    assert metal.figures is not None and metal.figures.cases == 9
    assert "on Metal stand-ins" in metal.text and "9 stand-in recordings" in metal.tooltip
    intel = Machine((assumed_gpu("Arc A770", 16, Vendor.INTEL),), HOST)
    vulkan = accuracy_band(p, _est(p, intel, "-fa", "on", "-ngl", "all"), data)
    assert vulkan.figures is not None and vulkan.figures.cases == 7 and "on Vulkan stand-ins" in vulkan.text
    cuda = accuracy_band(p, _est(p, ONE_GPU, "-fa", "on", "-ngl", "all"), data)
    assert cuda.figures is not None and cuda.figures.cases == 3 and "stand-ins" not in cuda.text


def test_the_compute_assumption_says_what_measured_a_vulkan_or_metal_plan() -> None:
    """The estimate's assumption line for a Metal or Vulkan GPU names its stand-ins and, for Metal, where their
    recordings show the compute model under; for Vulkan the limits it models (before: "not measured")."""
    p = sparse("llama-3.1-8b")
    apple = _est(p, Machine((assumed_gpu("M2", 64, Vendor.APPLE),), HOST), "-fa", "on", "-ngl", "all")
    intel = _est(p, Machine((assumed_gpu("Arc", 16, Vendor.INTEL),), HOST), "-fa", "on", "-ngl", "all")
    (metal,) = [a for a in apple.assumptions if a.startswith("GPU compute buffers")]
    (vulkan,) = [a for a in intel.assumptions if a.startswith("GPU compute buffers")]
    assert "Metal-shaped stand-ins" in metal and "flash-attention scratch" in metal and "Vulkan" not in metal
    assert "Vulkan-shaped stand-ins" in vulkan and "1 GiB chunks" in vulkan and "Metal" not in vulkan
