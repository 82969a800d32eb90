"""The one machine builder (`fitplan.core.inputs.machine`) for the CLI and the window."""

from __future__ import annotations

import pytest

from fitplan.core import hardware
from fitplan.core.base.devices import GIB
from fitplan.core.inputs.machine import MachineRequest, build_machine, hypothetical_gpu, planned_machine


def test_assumed_gpus_probe_only_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """With --assume-gpu the detected GPUs are not planned for, so their probes (and their complaints, such as a
    missing NVIDIA driver) stay out of the answer."""

    def no_gpu_probe() -> hardware.ProbeResult:
        raise AssertionError("the GPU probes ran")

    monkeypatch.setattr(hardware, "detect_hardware", no_gpu_probe)
    machine, problems = build_machine(MachineRequest(("2x 24GiB",)))
    assert [g.total_bytes for g in machine.gpus] == [24 * GIB, 24 * GIB]
    assert problems == ()


def test_two_identical_cards_are_two_devices() -> None:
    machine, _ = build_machine(MachineRequest(("2x 12GiB",), "64GiB"))
    assert len(machine.gpus) == 2 and machine.host.total_bytes == 64 * GIB


def test_planned_machine_with_a_hypothetical_host() -> None:
    gpu = hypothetical_gpu("A", 8 * GIB, "no-such-vendor")
    assert gpu.vendor.value == "generic" and gpu.free_bytes == 8 * GIB
    real_host = build_machine(MachineRequest(("8GiB",), "16GiB"))[0].host
    m = planned_machine([gpu], real_host, 32 * GIB)
    assert m.host.total_bytes == m.host.free_bytes == 32 * GIB and m.host.hypothetical
    assert planned_machine([gpu], real_host).host is real_host
