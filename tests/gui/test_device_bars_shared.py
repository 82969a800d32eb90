"""The device bars on a unified-memory machine: the host's row counts the RAM the GPU takes (one pool)."""

from __future__ import annotations

from typing import Any

from fitplan.core.base.devices import GIB, Device, DeviceKind, Machine, Vendor, host_device
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.estimate.estimator import estimate
from fitplan.core.inputs.model_source import load_model
from fitplan.gui.panels.device_bars import DeviceBarsPanel

from .conftest import LLAMA


def _host_text(panel: DeviceBarsPanel) -> str:
    name, _bar, text = next(r for r in panel.rows if r[0].text() == "Host")
    return text.text() + "\n" + name.toolTip()


def test_host_row_counts_what_a_unified_gpu_takes(qtbot: Any) -> None:
    profile = load_model(str(LLAMA)).profile
    settings = LaunchSettings(n_ctx=8192, n_parallel=1)
    unified = Device("GB10", DeviceKind.GPU, 100 * GIB, 100 * GIB, Vendor.NVIDIA, unified_memory=True,
                     host_shared_bytes=100 * GIB)  # fmt: skip
    est = estimate(profile, settings, Machine((unified,), host_device(100 * GIB)))
    panel = DeviceBarsPanel()
    qtbot.addWidget(panel)
    panel.set_estimate(est, (0, 0))
    gpu_used, host_own = est.devices[0].used_bytes, est.devices[-1].used_bytes
    assert est.gpu_host_share_bytes == gpu_used
    assert _host_text(panel).startswith(f"{(host_own + gpu_used) / GIB:.1f} / 100.0 GiB")
    assert "taken by the GPUs" in _host_text(panel)

    discrete = Device("RTX", DeviceKind.GPU, 24 * GIB, 24 * GIB, Vendor.NVIDIA)
    est2 = estimate(profile, settings, Machine((discrete,), host_device(100 * GIB)))
    panel.set_estimate(est2, (0, 0))
    assert est2.gpu_host_share_bytes == 0
    assert _host_text(panel).startswith(f"{est2.devices[-1].used_bytes / GIB:.1f} / 100.0 GiB")
    assert "taken by the GPUs" not in _host_text(panel)
