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


def test_a_hypothetical_gpu_with_shared_memory_is_one_pool_with_the_host() -> None:
    from fitplan.core.base.devices import GIB
    from fitplan.core.inputs.machine import hypothetical_gpu

    apu = hypothetical_gpu("Radeon 8060S 128GB", 64 * GIB, "amd", 63 * GIB)
    assert apu.unified_memory and apu.host_shared_bytes == 63 * GIB
    assert (
        apu.host_spill(GIB // 2) == 0 and apu.host_spill(10 * GIB) == 9 * GIB
    )  # beyond its 1 GiB of its own
    card = hypothetical_gpu("RTX 4090", 24 * GIB, "nvidia")
    assert not card.unified_memory and card.host_spill(20 * GIB) == 0
