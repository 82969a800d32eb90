"""The speed model (`fitplan.core.speed`), its figures and its calibration on published results
(tools/speed_report.py, docs/speed.md)."""

from __future__ import annotations

import json
import math
import types
from typing import Any

import pytest

from fitplan.core.base.devices import GIB, Machine, host_device
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.hardware import nvidia
from fitplan.core.hardware.catalog import assumed_devices, load_catalog
from fitplan.core.speed import SpeedClass, plan_speed
from fitplan.core.speed.figures import GB, load_speed_table, machine_figures
from fitplan.core.speed.model import load_calibration
from support.models import REPO, sparse
from support.tools import load_tool


@pytest.fixture(scope="module")
def report() -> Any:
    return load_tool("tools/speed_report.py")


@pytest.fixture(scope="module")
def generated(report: Any) -> tuple[str, str, list[Any]]:
    out: tuple[str, str, list[Any]] = report.generate()
    return out


def test_every_catalog_gpu_has_speed_figures_with_a_source() -> None:
    table = load_speed_table()
    for gpu in load_catalog():
        fig = table.find(gpu.name)
        assert fig is not None, gpu.name
        assert fig.bandwidth_gbs > 0 and fig.fp16_tflops > 0 and fig.source


@pytest.mark.parametrize(
    "spec",
    [
        "TITAN V",
        "Quadro RTX 6000",
        "Quadro RTX 4000",
        "RTX A4500",
        "RTX 4060 Mobile",
        "GTX 1660 Ti Mobile",
        "Arc Pro B60",
        "Arc Pro B50",
        "Arc A770M",
        "RX 5700 XT",
    ],
)
def test_gpus_people_publish_for_are_known(spec: str) -> None:
    """These were unknown to --assume-gpu (issue 23); each now has a size and speed figures."""
    (dev,) = assumed_devices([spec])
    assert dev.total_bytes > 0
    assert load_speed_table().find(dev.name) is not None


def test_speed_figures_for_shared_memory_machines() -> None:
    table = load_speed_table()
    for name in ("Radeon 8060S", "Jetson AGX Orin", "GB10", "Arc A770", "Radeon 780M"):
        assert table.find(name) is not None, name


def test_nvml_bus_width_and_memory_clock_give_the_bandwidth() -> None:
    """A 4090: 384-bit bus, NVML's max memory clock 10501 MHz (double data rate) -> 1008 GB/s."""
    fake = types.SimpleNamespace(
        nvmlDeviceGetMemoryBusWidth=lambda h: 384,
        nvmlDeviceGetMaxClockInfo=lambda h, t: 10501 if t == 2 else 2520,
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 4,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
    )
    assert nvidia.memory_bandwidth(fake, None) == pytest.approx(1008.0e9, rel=1e-3)
    assert nvidia.pcie_bandwidth(fake, None) == pytest.approx(31.5e9, rel=1e-3)


def test_nvml_without_the_functions_reports_nothing() -> None:
    def missing(*_: object) -> int:
        raise AttributeError("nvmlDeviceGetMemoryBusWidth")

    fake = types.SimpleNamespace(
        nvmlDeviceGetMemoryBusWidth=missing,
        nvmlDeviceGetMaxClockInfo=missing,
        nvmlDeviceGetMaxPcieLinkGeneration=missing,
        nvmlDeviceGetMaxPcieLinkWidth=missing,
    )
    assert nvidia.memory_bandwidth(fake, None) == 0.0
    assert nvidia.pcie_bandwidth(fake, None) == 0.0


def test_host_bandwidth_flag_is_used_and_said() -> None:
    m = Machine(assumed_devices(["RTX 3060"]), host_device(64 * GIB))
    figs = machine_figures(m, host_bandwidth=40 * GB)
    assert figs.host.bandwidth == 40 * GB
    assert any("--host-bandwidth" in a for a in figs.assumptions)


def _speed(ncmoe: int = 0, ngl: int = -2, gpu: str = "RTX 3090") -> Any:
    p = sparse("qwen3-30b-a3b")
    m = Machine(assumed_devices([gpu]), host_device(128 * GIB))
    return plan_speed(
        p, m, LaunchSettings(n_ctx=8192, n_cpu_moe=ncmoe, n_gpu_layers=ngl), host_bandwidth=60e9
    )


def test_more_experts_on_the_host_is_slower_and_changes_class() -> None:
    full, some, more = _speed(0), _speed(10), _speed(30)
    assert full.speed_class is SpeedClass.FULL and some.speed_class is SpeedClass.EXPERTS
    assert full.generation.tps > some.generation.tps > more.generation.tps
    assert full.prompt.tps > more.prompt.tps


def test_fewer_gpu_layers_is_partial_and_slower() -> None:
    partial = _speed(ngl=20)
    assert partial.speed_class is SpeedClass.PARTIAL
    assert partial.generation.tps < _speed().generation.tps


def test_a_deeper_context_reads_more_and_is_slower() -> None:
    s = _speed()
    assert s.generation_full.tps < s.generation.tps
    assert s.generation.low < s.generation.tps < s.generation.high


def test_a_faster_card_is_faster() -> None:
    assert _speed(gpu="RTX 4090").generation.tps > _speed(gpu="RTX 3060 12GB").generation.tps


def test_calibration_file_is_what_the_report_generates(generated: tuple[str, str, list[Any]]) -> None:
    packaged = (REPO / "app" / "fitplan" / "data" / "speed_calibration.json").read_text(encoding="utf-8")
    assert packaged == generated[1], "regenerate it: python tools/speed_report.py --write"
    assert (REPO / "docs" / "speed.md").read_text(encoding="utf-8") == generated[0]


def test_the_held_out_rows_are_chosen_before_fitting(report: Any) -> None:
    """The split is a function of each row alone: fitting never sees a held-out row's number."""
    rows = report.load_rows()
    held = [r.held_out for r in rows]
    assert 0 < sum(held) < len(rows)
    changed = [report.Row(r.index, {**r.data, "tps": r.tps * 2}) for r in rows]
    assert [r.held_out for r in changed] == held
    a = report.fit(rows)
    b = report.fit([r if not r.held_out else changed[i] for i, r in enumerate(rows)])
    assert a == b


def test_every_published_row_names_its_address_and_build(report: Any) -> None:
    for r in report.load_rows():
        assert str(r.get("address")).startswith("https://")
        assert r.get("build") and r.get("gpu") and r.get("test")


def test_targets_reported_as_measured(report: Any, generated: tuple[str, str, list[Any]]) -> None:
    """docs/speed.md states each target's reach on the held-out rows; the prompt target holds."""
    results = generated[2]
    held = [x for x in results if x.row.held_out]
    pp = [x for x in held if x.row.kind == "pp"]
    assert pp and sum(abs(x.error) <= 0.30 for x in pp) / len(pp) >= 0.60
    for line in report.target_lines(results):
        assert line in generated[0]


def test_bands_come_from_held_out_rows(generated: tuple[str, str, list[Any]]) -> None:
    cal = load_calibration()
    held_tg = [abs(math.log(x.ratio)) for x in generated[2] if x.row.held_out and x.row.kind == "tg"]
    assert cal.bands["all/tg"] in [round(v, 4) for v in held_tg]
    assert json.loads(generated[1])["rows"]["held_out"] == sum(1 for x in generated[2] if x.row.held_out)


def test_plan_json_and_text_carry_the_speed(capsys: pytest.CaptureFixture[str]) -> None:
    from fitplan.cli import main

    model = str(REPO / "tests/fixtures/llamacpp/models/sparse/llama-3.1-8b.header.gguf")
    common = [
        model,
        "--header-only",
        "--assume-gpu",
        "RTX 4090",
        "--host-ram",
        "64GiB",
        "--host-bandwidth",
        "50",
    ]
    assert main(["plan", *common, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["speed"]["class"] == "full offload"
    assert (
        doc["speed"]["generation"]["low"]
        < doc["speed"]["generation"]["tps"]
        < doc["speed"]["generation"]["high"]
    )
    assert any("50.0 GB/s" in a for a in doc["speed"]["assumptions"])
    assert main(["estimate", *common, "-c", "4096"]) == 0
    assert "speed: generation" in capsys.readouterr().out


def test_a_bad_host_bandwidth_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from fitplan.cli import main

    assert main(["plan", "x.gguf", "--host-bandwidth", "-3"]) == 2
    assert "not a bandwidth" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("reported", "catalog"),
    [
        ("AMD Radeon RX 7900 XTX", "Radeon RX 7900 XTX"),  # amdgpu's product_name
        ("Apple M2 Max", "Apple M2 Max"),  # machdep.cpu.brand_string
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),  # NVML's name
        ("RTX 3060 12 GiB", "GeForce RTX 3060"),  # a catalog configuration's name
    ],
)
def test_detected_names_find_their_figures(reported: str, catalog: str) -> None:
    fig = load_speed_table().find(reported)
    assert fig is not None and fig.name == catalog


def test_the_drivers_bandwidth_wins_over_the_catalog() -> None:
    from dataclasses import replace

    from fitplan.core.speed.figures import gpu_figures

    (dev,) = assumed_devices(["RTX 4090"])
    fig, note = gpu_figures(replace(dev, memory_bandwidth=900e9, link_bandwidth=15.75e9))
    assert fig.bandwidth == 900e9 and fig.link == 15.75e9 and note is None
    assert "driver" in fig.source


def test_cpu_only_and_no_device_plans_have_a_speed() -> None:
    p = sparse("llama-3.1-8b")
    cpu_only = plan_speed(
        p, Machine((), host_device(64 * GIB)), LaunchSettings(n_ctx=4096), host_bandwidth=50e9
    )
    assert cpu_only.speed_class is SpeedClass.CPU and cpu_only.devices[0].name == "Host"
    m = Machine(assumed_devices(["RTX 3060"]), host_device(64 * GIB))
    none = plan_speed(p, m, LaunchSettings(n_ctx=4096, devices=()), host_bandwidth=50e9)
    assert none.speed_class is SpeedClass.CPU
    assert none.generation.tps == pytest.approx(cpu_only.generation.tps)
    gpu = plan_speed(p, m, LaunchSettings(n_ctx=4096), host_bandwidth=50e9)
    assert gpu.generation.tps > 3 * none.generation.tps


def _amd_card(root: Any, files: dict[str, str]) -> None:
    d = root / "class" / "drm" / "card0" / "device"
    d.mkdir(parents=True)
    for k, v in files.items():
        (d / k).write_text(v + "\n")


def test_amd_sysfs_memory_clock_gives_the_bandwidth(tmp_path: Any) -> None:
    """amdgpu names no product on consumer boards and gives no bandwidth: the PCI id and revision name the board
    (744c rev c8: RX 7900 XTX), pp_dpm_mclk's top level (1249 MHz) x 16 transfers (GDDR6) x the catalog's 384-bit
    bus gives 959 GB/s."""
    from fitplan.core.hardware.amd import AmdSysfsProbe
    from fitplan.core.speed.figures import gpu_figures

    _amd_card(
        tmp_path,
        {
            "vendor": "0x1002",
            "device": "0x744c",
            "revision": "0xc8",
            "mem_info_vram_total": str(24 * GIB),
            "mem_info_vram_used": "0",
            "mem_info_vram_vendor": "samsung",
            "pp_dpm_mclk": "0: 96Mhz *\n1: 456Mhz\n2: 772Mhz\n3: 1249Mhz",
            "uevent": "PCI_SLOT_NAME=0000:03:00.0",
        },
    )
    (gpu,) = AmdSysfsProbe(tmp_path, {}).probe().gpus
    dev = gpu.device
    assert dev.name == "Radeon RX 7900 XTX" and dev.memory_clock_mhz == 1249.0
    assert "VRAM samsung" in dev.detail
    fig, note = gpu_figures(dev)
    assert fig.bandwidth == pytest.approx(384 / 8 * 1249e6 * 16)
    assert note is None and "1249 MHz" in fig.source


def test_amd_clock_without_a_known_memory_type_keeps_the_catalog_figure(tmp_path: Any) -> None:
    """HBM2e's transfers per reported clock are not published with a measured pair: the catalog's bandwidth stays."""
    from fitplan.core.hardware.amd import AmdSysfsProbe
    from fitplan.core.speed.figures import gpu_figures

    _amd_card(
        tmp_path,
        {
            "vendor": "0x1002",
            "product_name": "AMD Instinct MI210",
            "mem_info_vram_total": str(64 * GIB),
            "mem_info_vram_used": "0",
            "pp_dpm_mclk": "0: 400Mhz\n1: 1600Mhz *",
        },
    )
    (gpu,) = AmdSysfsProbe(tmp_path, {}).probe().gpus
    assert gpu.device.memory_clock_mhz == 1600.0
    fig, _ = gpu_figures(gpu.device)
    assert fig.bandwidth == load_speed_table().find("Instinct MI210").bandwidth_gbs * GB  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "mhz"),
    [
        ("0: 96Mhz *\n3: 1249Mhz", 1249.0),
        ("", 0.0),
        (None, 0.0),
        ("garbage\n1: fastMhz", 0.0),
        ("1: 875MHz", 875.0),
    ],
)
def test_pp_dpm_mclk_parsing(text: str | None, mhz: float) -> None:
    from fitplan.core.hardware.amd import max_memory_clock

    assert max_memory_clock(text) == mhz


def test_an_unknown_amd_revision_keeps_the_pci_ids(tmp_path: Any) -> None:
    from fitplan.core.hardware.amd import AmdSysfsProbe

    _amd_card(
        tmp_path,
        {
            "vendor": "0x1002",
            "device": "0x744c",
            "revision": "0xcc",
            "mem_info_vram_total": str(20 * GIB),
            "mem_info_vram_used": "0",
        },
    )
    (gpu,) = AmdSysfsProbe(tmp_path, {}).probe().gpus
    assert gpu.device.name == "AMD GPU 1002:744c" and gpu.device.memory_clock_mhz == 0.0


def test_pipeline_overlaps_micro_batches_of_one_call() -> None:
    """llama.cpp pipelines the micro-batches of one llama_decode across layer-split GPUs: a call of k micro-batches
    takes sum(stage) + (k - 1) x max(stage), not k x sum(stage)."""
    from fitplan.core.speed.model import pipeline_factor

    assert pipeline_factor([1.0, 1.0], True, 512, 512, 2048) == 1.0  # one micro-batch: nothing to overlap
    assert pipeline_factor([1.0, 1.0], True, 4096, 512, 2048) == pytest.approx((2 + 3 * 1) / (4 * 2))
    assert pipeline_factor([1.0, 3.0], True, 4096, 512, 2048) == pytest.approx((4 + 3 * 3) / (4 * 4))
    assert pipeline_factor([1.0, 1.0], False, 4096, 512, 2048) == 1.0
    assert pipeline_factor([1.0], True, 4096, 512, 2048) == 1.0


@pytest.mark.parametrize(
    ("extra", "pipelined"),
    [
        ({}, True),
        ({"split_mode": "row"}, False),
        ({"no_kv_offload": True}, False),
        ({"n_gpu_layers": 20}, False),
    ],
)
def test_pipeline_needs_every_layer_on_gpus_layer_split_and_kv_offload(
    extra: dict[str, Any], pipelined: bool
) -> None:
    """src/llama-context.cpp enables pipeline parallelism only with more than one device, all layers offloaded,
    layer split, the KV cache offloaded and no tensor overrides."""
    from dataclasses import replace

    from fitplan.core.base.launch_settings import SplitMode
    from fitplan.core.speed.work import model_work

    p = sparse("llama-3.1-8b")
    m = Machine(assumed_devices(["2x RTX 4090"]), host_device(128 * GIB))
    s = LaunchSettings(n_ctx=4096, n_gpu_layers=99)
    if "split_mode" in extra:
        extra = {**extra, "split_mode": SplitMode(extra["split_mode"])}
    assert model_work(p, replace(s, **extra), m).pipeline is pipelined
    one = Machine(assumed_devices(["RTX 4090"]), host_device(128 * GIB))
    assert model_work(p, s, one).pipeline is False


def test_moe_overrides_turn_the_pipeline_off() -> None:
    p = sparse("qwen3-30b-a3b")
    m = Machine(assumed_devices(["2x RTX 3090"]), host_device(128 * GIB))
    from fitplan.core.speed.work import model_work

    assert model_work(p, LaunchSettings(n_ctx=4096, n_gpu_layers=99), m).pipeline is True
    assert model_work(p, LaunchSettings(n_ctx=4096, n_gpu_layers=99, n_cpu_moe=4), m).pipeline is False


def test_a_long_prompt_on_two_gpus_is_faster_than_the_sum_of_their_stages() -> None:
    """pp4096 in calls of 2048 tokens (4 micro-batches of 512) on two GPUs: faster than without the pipeline."""
    from dataclasses import replace

    from fitplan.core.speed.model import predict
    from fitplan.core.speed.work import model_work

    p = sparse("llama-3.1-8b")
    m = Machine(assumed_devices(["2x RTX 4090"]), host_device(128 * GIB))
    work = model_work(p, LaunchSettings(n_ctx=8192, n_gpu_layers=99), m)
    figs = machine_figures(m, 50e9)
    from fitplan.core.speed.model import Backend

    cal = load_calibration()
    piped = predict(work, figs, (Backend.CUDA, Backend.CUDA), cal, n_prompt=4096, n_ubatch=512, n_batch=2048)
    plain = predict(
        replace(work, pipeline=False), figs, (Backend.CUDA, Backend.CUDA), cal, n_prompt=4096, n_ubatch=512
    )
    assert piped.prompt_tps > 1.3 * plain.prompt_tps
    assert piped.generation_tps == plain.generation_tps


def test_unquantized_weights_are_counted_apart() -> None:
    """F16/BF16/F32 matrices go to a float GEMM, quantized ones to llama.cpp's own kernels: the work keeps the
    FLOPs of the first apart, and a calibration whose float share is higher makes such a model's prompt faster."""
    from dataclasses import replace

    from fitplan.core.speed.model import Backend, BackendConstants, Calibration, predict
    from fitplan.core.speed.work import model_work

    q = sparse("llama-3.1-8b")
    f16 = replace(q, tensors=tuple(replace(t, type_name="F16") for t in q.tensors))
    m = Machine(assumed_devices(["RTX 4090"]), host_device(64 * GIB))
    s = LaunchSettings(n_ctx=4096, n_gpu_layers=99)
    wq, wf = model_work(q, s, m), model_work(f16, s, m)
    assert wq.gpus[0].dense_flops_16 == 0.0
    assert wf.gpus[0].dense_flops_16 == wf.gpus[0].dense_flops > 0
    figs = machine_figures(m, 50e9)
    same = Calibration(
        backends={"cuda": BackendConstants(0.8, 0.0, 0.4)},
        host_efficiency=0.5,
        link_efficiency=0.7,
        split_us=0.0,
        host_layer_us=0.0,
    )
    faster = replace(same, backends={"cuda": BackendConstants(0.8, 0.0, 0.4, 0.8)})
    assert (
        predict(wf, figs, (Backend.CUDA,), faster).prompt_tps
        > 1.5 * predict(wf, figs, (Backend.CUDA,), same).prompt_tps
    )
    # a quantized model only gains on its attention
    assert (
        predict(wq, figs, (Backend.CUDA,), faster).prompt_tps
        < 1.1 * predict(wq, figs, (Backend.CUDA,), same).prompt_tps
    )


def test_a_printed_size_of_two_bytes_per_weight_is_an_unquantized_row(report: Any) -> None:
    """The headers carry one quantization mix; a row whose printed size is 2 bytes per weight ran F16."""
    rows = [r for r in report.load_rows() if r.get("model_label") == "llama 7B F16"]
    assert rows
    work, _, _, _ = report.setup(rows[0])
    assert work.gpus[0].dense_flops_16 == work.gpus[0].dense_flops
    q = next(r for r in report.load_rows() if r.get("model_label") == "llama 7B Q4_0")
    work_q, _, _, _ = report.setup(q)
    assert work_q.gpus[0].dense_flops_16 == 0.0


def test_pascal_quantized_products_use_the_dp4a_rate() -> None:
    """ggml-cuda runs quantized matrix products on GPUs without tensor cores with dp4a (four int8 multiply-adds per
    FP32 instruction): their quantized prompt FLOPs are divided by 4 x the FP32 rate; F16 weights keep the FP32 rate."""
    from dataclasses import replace

    from fitplan.core.speed.figures import gpu_figures
    from fitplan.core.speed.model import Backend, predict
    from fitplan.core.speed.work import model_work

    (p40,) = assumed_devices(["Tesla P40"])
    fig, _ = gpu_figures(p40)
    assert fig.q_flops == pytest.approx(4 * fig.flops)
    (ada,) = assumed_devices(["RTX 4090"])
    assert gpu_figures(ada)[0].q_flops == gpu_figures(ada)[0].flops  # tensor cores: no separate rate
    m = Machine((p40,), host_device(64 * GIB))
    p = sparse("llama-3.1-8b")
    work = model_work(p, LaunchSettings(n_ctx=4096, n_gpu_layers=99), m)
    figs = machine_figures(m, 50e9)
    cal = load_calibration()
    with_dp4a = predict(work, figs, (Backend.CUDA,), cal).prompt_tps
    without = predict(
        work, replace(figs, gpus=(replace(figs.gpus[0], quant_flops=0.0),)), (Backend.CUDA,), cal
    ).prompt_tps
    assert with_dp4a > 2 * without


def test_sliding_window_layers_read_at_most_their_window() -> None:
    """A token attends to at most n_swa cells of a sliding-window layer (the mask hides the rest), so at a long
    context only the full-attention layers' KV reads grow with the depth: gemma-3-27b (5 of 6 layers with a window of
    1024) keeps most of its speed at 32K; with --swa-full the cache keeps every cell and they are all charged."""
    from fitplan.core.speed.work import model_work

    profile = sparse("gemma-3-27b")
    machine = Machine(assumed_devices(["RTX 3090"]), host_device(64 * GIB))
    settings = LaunchSettings(n_ctx=32768, n_gpu_layers=999)
    gpu = next(d for d in model_work(profile, settings, machine).devices if d.gpu == 0)
    swa_layers = [lp for lp in profile.layers if lp.is_swa]
    assert gpu.swa_window == profile.n_swa > 0 and 0 < len(swa_layers) < profile.n_layer
    assert 0 < gpu.kv_swa_bytes_per_cell < gpu.kv_bytes_per_cell
    full = gpu.kv_bytes_per_cell - gpu.kv_swa_bytes_per_cell
    assert gpu.kv_read(32768) == pytest.approx(full * 32768 + gpu.kv_swa_bytes_per_cell * profile.n_swa)
    assert gpu.kv_read(512) == pytest.approx(gpu.kv_bytes_per_cell * 512)  # inside the window: every layer
    windowed = plan_speed(profile, machine, settings).generation_full.tps
    swa_full = plan_speed(profile, machine, LaunchSettings(n_ctx=32768, n_gpu_layers=999, swa_full=True))
    assert windowed > swa_full.generation_full.tps
