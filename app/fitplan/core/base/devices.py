"""Devices an estimate is made for: GPUs (detected or hypothetical), RPC servers, and the host."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from fitplan.core.base.units import GIB as GIB
from fitplan.core.base.units import MIB as MIB

#: include/llama.h llama_max_devices(): llama.cpp uses at most this many devices, every kind together.
LLAMA_MAX_DEVICES = 16


class DeviceKind(StrEnum):
    GPU = "gpu"
    CPU = "cpu"  # host RAM


class Vendor(StrEnum):
    NVIDIA = "nvidia"
    AMD = "amd"
    APPLE = "apple"  # unified memory
    INTEL = "intel"
    RPC = "rpc"  # a ggml-rpc-server; `host` holds host:port
    GENERIC = "generic"
    HOST = "host"


@dataclass(frozen=True, slots=True)
class Device:
    """One memory pool llama.cpp allocates in."""

    name: str  # "CUDA0", "RTX 4090", "Host"
    kind: DeviceKind
    total_bytes: int
    free_bytes: int
    vendor: Vendor = Vendor.GENERIC
    hypothetical: bool = False  # added by the user, not detected
    backend_name: str = ""  # llama.cpp's device name ("CUDA0", "RPC0"...); empty = derived
    host: str = ""  # for RPC devices: "host:port"
    unified_memory: bool = (
        False  # the GPU allocates from host RAM (Apple, GB10/Jetson, AMD APUs, Intel iGPUs)
    )
    detail: str = ""  # driver, compute capability, PCI bus... for display
    #: what the driver reports for the speed model (bytes/s; 0 = not reported, the catalog's figures are used):
    #: the memory bus (bus width x max memory clock) and the PCIe link (generation x width)
    memory_bandwidth: float = 0.0
    link_bandwidth: float = 0.0
    #: the top memory clock (MHz) where the driver gives a clock but no bandwidth (amdgpu's pp_dpm_mclk); the speed
    #: model turns it into a bandwidth with the catalog's bus width and memory type (0 = not reported)
    memory_clock_mhz: float = 0.0
    #: the part of `free_bytes` that is host RAM: what the GPU uses beyond `free_bytes - host_shared_bytes` comes
    #: out of the host's pool (all of it on Apple, GB10, Jetson and Intel iGPUs; the GTT part on an AMD APU)
    host_shared_bytes: int = 0
    #: Windows: the shared GPU memory (system RAM) the driver lets a discrete GPU spill into instead of failing
    os_shared_bytes: int = 0
    #: the GPU's Vulkan driver has VK_EXT_shader_64bit_indexing: ggml-vulkan then lets an op touch a tensor up to
    #: the maximum buffer size instead of maxStorageBufferRange (`ggml_backend_vk_device_supports_op`). Not
    #: detected (no Vulkan query here): False, the limit ggml-vulkan has without the extension
    shader_64bit_indexing: bool = False

    def host_spill(self, used_bytes: int) -> int:
        """The bytes of `used_bytes` on this GPU that come out of host RAM (0 for a discrete card's VRAM)."""
        if self.host_shared_bytes <= 0:
            return 0
        dedicated = max(0, self.free_bytes - self.host_shared_bytes)
        return max(0, used_bytes - dedicated)


def assumed_gpu(name: str, gib: float, vendor: Vendor = Vendor.NVIDIA) -> Device:
    """A hypothetical GPU of `gib` GiB, entirely free ("24 GiB GPU")."""
    total = int(gib * GIB)
    return Device(
        name=name, kind=DeviceKind.GPU, total_bytes=total, free_bytes=total, vendor=vendor, hypothetical=True
    )


def host_device(total_bytes: int, free_bytes: int | None = None) -> Device:
    return Device(
        name="Host",
        kind=DeviceKind.CPU,
        total_bytes=total_bytes,
        free_bytes=total_bytes if free_bytes is None else free_bytes,
        vendor=Vendor.HOST,
    )


@dataclass(frozen=True, slots=True)
class Machine:
    """The GPUs in llama.cpp's enumeration order (RPC first, then local GPUs) plus the host."""

    gpus: tuple[Device, ...]
    host: Device

    @property
    def all(self) -> tuple[Device, ...]:
        return (*self.gpus, self.host)
