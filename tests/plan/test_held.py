"""Whose memory is whose on each device (`core.plan.held`): other programs by process where the driver lists them,
what none accounts for, the margin and the named reserves."""

from __future__ import annotations

from fitplan.core.base.devices import GIB, MIB, Device, DeviceKind, Machine, Vendor, assumed_gpu, host_device
from fitplan.core.hardware.probe import DetectedGpu, GpuProcess
from fitplan.core.plan.held import UNLISTED, held_memory
from fitplan.core.plan.usage import MarginPolicy, Reserve, held_by_others

CARD = Device("RTX 4090", DeviceKind.GPU, 24 * GIB, 20 * GIB, Vendor.NVIDIA)
PROCS = (
    GpuProcess(1432, "Xorg", 600 * MIB, "graphics"),
    GpuProcess(4242, "firefox", 1200 * MIB, "graphics"),
    GpuProcess(77, "", None, "compute"),  # listed, amount not told (WDDM)
)
DETECTED = (DetectedGpu(CARD, "GPU-0", 0, used_bytes=4 * GIB, processes=PROCS),)


def test_each_process_then_what_none_accounts_for() -> None:
    machine = Machine((CARD, assumed_gpu("spare", 12)), host_device(64 * GIB, 40 * GIB))
    margin = MarginPolicy(per_gpu_bytes=(2048 * MIB, 256 * MIB), reserves=(Reserve(0, 512 * MIB, "desktop"),))
    card, spare, host = held_memory(machine, DETECTED, margin)
    assert card.others_bytes == 4 * GIB
    assert [(h.label, h.bytes) for h in card.holders] == [
        ("Xorg (1432)", 600 * MIB),
        ("firefox (4242)", 1200 * MIB),
        ("pid 77", None),
        (UNLISTED, 4 * GIB - 1800 * MIB),
    ]
    # the margin is the planner's: the GPU's own plus its named reserve; capacity as MarginPolicy computes it
    assert card.margin_bytes == 2560 * MIB and [(r.name, r.bytes) for r in card.reserves] == [
        ("desktop", 512 * MIB)
    ]
    assert card.capacity_bytes == margin.capacity(CARD, 0) == 20 * GIB - 2560 * MIB
    assert "margin kept free: 2560 MiB (of it desktop 512 MiB)" in card.lines()
    assert card.others_lines()[0] == "held by other programs: 4096 MiB"
    # a hypothetical card holds nothing of others'; the host's others are what is not available
    assert spare.others_bytes == 0 and spare.holders == () and spare.margin_bytes == 256 * MIB
    assert host.others_bytes == 24 * GIB and [h.bytes for h in host.holders] == [24 * GIB]


def test_a_gpu_without_a_process_list_is_held_by_the_unlisted() -> None:
    (card, _host) = held_memory(Machine((CARD,), host_device(8 * GIB)), (), MarginPolicy())
    assert [(h.name, h.bytes) for h in card.holders] == [(UNLISTED, 4 * GIB)]


def test_the_cli_lines_read_the_same_holders() -> None:
    (line,) = held_by_others(Machine((CARD,), host_device(8 * GIB)), DETECTED)
    assert line == (
        "GPU0 (RTX 4090): 4096 MiB in use by others: Xorg (1432) holds 600 MiB (graphics); firefox (4242) holds 1200 MiB "
        f"(graphics); pid 77 holds an unknown amount (compute); {UNLISTED} 2296 MiB"
    )
