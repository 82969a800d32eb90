"""The device bars say whose memory is whose: what other programs hold (by process where the driver lists them)
is drawn before the free memory and named under the bar, from the core's `held_memory`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fitplan.core.base.devices import GIB, MIB, Device, DeviceKind, Machine, Vendor, host_device
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.estimate.estimator import estimate
from fitplan.core.hardware.probe import DetectedGpu, GpuProcess
from fitplan.core.inputs.model_source import load_model
from fitplan.core.plan.held import held_memory
from fitplan.core.plan.usage import MarginPolicy
from fitplan.gui.backend import Detection
from fitplan.gui.panels.device_bars import DeviceBarsPanel

from .conftest import LLAMA, make_window

pytestmark = [pytest.mark.gui]

CARD = Device("RTX 4090", DeviceKind.GPU, 24 * GIB, 20 * GIB, Vendor.NVIDIA)
HOST = host_device(64 * GIB, 40 * GIB)
DETECTED = (
    DetectedGpu(
        CARD,
        "GPU-0",
        0,
        used_bytes=4 * GIB,
        processes=(
            GpuProcess(1432, "Xorg", 600 * MIB, "graphics"),
            GpuProcess(4242, "firefox", 1200 * MIB, "graphics"),
        ),
    ),
)


def test_bars_draw_and_name_what_others_hold(qtbot: Any) -> None:
    profile = load_model(str(LLAMA)).profile
    machine = Machine((CARD,), HOST)
    est = estimate(profile, LaunchSettings(n_ctx=8192, n_parallel=1), machine)
    margin = MarginPolicy()
    panel = DeviceBarsPanel()
    qtbot.addWidget(panel)
    panel.set_estimate(est, margin.kept_free(machine), held_memory(machine, DETECTED, margin))
    (gpu_name, gpu_bar, _text), (_hn, host_bar, _ht) = panel.rows[:2]
    assert gpu_bar.others == 4 * GIB and host_bar.others == 24 * GIB
    assert (
        panel.held[0].text()
        == "others hold 4.0 GiB: Xorg 0.6, firefox 1.2, the driver and unlisted processes 2.2"
    )
    assert "firefox (4242): 1200 MiB (graphics)" in gpu_name.toolTip()
    assert not panel.held[1].isVisibleTo(panel)  # the host: no process list, the grey part and the tooltip
    assert "held by other programs: 24.00 GiB" in host_bar.toolTip()
    # without owners (an old outcome, a hypothetical machine) nothing is drawn before the free memory
    panel.set_estimate(est, margin.kept_free(machine))
    assert gpu_bar.others == 0 and not panel.held[0].isVisibleTo(panel)


def test_the_window_passes_the_probed_processes_to_the_plan(qtbot: Any, private_config: Path) -> None:
    w = make_window(qtbot, Detection((CARD,), HOST, (), DETECTED), private_config)
    w.show()
    w.planner.start(str(LLAMA))
    qtbot.waitUntil(lambda: not w.planner._debounce.isActive() and w.planner.settled(), timeout=20000)
    held = w.planner.outcome.held
    assert [h.label for h in held[0].holders][:2] == ["Xorg (1432)", "firefox (4242)"]
    assert held[0].margin_bytes == w.planner.outcome.margins[0]
    bar = w.devices.rows[0][1]
    assert bar.others == 4 * GIB and w.devices.held[0].isVisible()
    assert "free 20.0 GiB" in w.chart.marks_text()
    assert w.chart.marks.toolTip().startswith("free 20.0 of 24.0 GiB; held by other programs: 4096 MiB")
    assert "Xorg (1432): 600 MiB (graphics)" in w.chart.marks.toolTip()
