"""Hypothetical GPUs: the bundled catalog (`fitplan/data/gpu_catalog.json`) and `--assume-gpu` specs.

Spec grammar (case-insensitive, spaces optional):

    [N x] NAME              "RTX 4090", "2x RTX 3090", "A100 40GB", "M2 Max 64GB"
    [N x] SIZE              "24GiB", "2 x 24GB"
    [N x] NAME=SIZE         "RTX 4090=24GiB", "my card=11.5GiB"

SIZE is a number with an optional unit: GiB/GB/G (the default), MiB/MB/M, TiB/TB/T. GPU memory is sold in binary
units ("24 GB" boards have 24 GiB), so GB is read as GiB and MB as MiB. A NAME may end with a SIZE to pick one of
the catalog's configurations ("A100 80GB"); without one, the catalog's most common configuration is used.
Apple Silicon entries are unified memory: the GPU gets macOS's default Metal working set of that RAM
(`estimated_metal_working_set`).

Other memory kinds (`memory_kind` in the catalog; `reported_gib` maps a configuration to what the backend
reports of it, from published logs listed under `evidence`):

* "dedicated" (the default): a discrete card; its memory is `reported_gib` of the configuration, else the
  configuration itself.
* "unified" (NVIDIA GB10 / DGX Spark, Jetson): the GPU allocates from the RAM the OS sees (`reported_gib`: what
  llama.cpp's CUDA backend reports as the total); the machine's host RAM is that same pool.
* "apu" (AMD Strix Halo, 780M): a firmware carve-out (`carve_out_gib`) and the GTT, which the kernel sizes at half
  of the RAM the OS sees by default (TTM's page limit); the GPU gets carve-out + GTT, the GTT part shared with the
  host, whose RAM is what the OS sees (RAM - carve-out).

A unified or APU entry plans a whole machine: its RAM becomes the host RAM unless --host-ram says otherwise, and
the plan counts the shared bytes once (core/plan/pool.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from fitplan.core.base.devices import GIB, LLAMA_MAX_DEVICES, Device, Vendor
from fitplan.core.base.errors import FitplanError
from fitplan.core.base.files import package_text
from fitplan.core.base.numbers import int_or_none, is_digits, json_real, loads_json, real_or_none
from fitplan.core.hardware.apple import estimated_metal_working_set
from fitplan.core.hardware.config import AssumedGpu

_UNITS = {
    "": GIB,
    "g": GIB,
    "gb": GIB,
    "gib": GIB,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tib": 1 << 40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(gib|gb|g|mib|mb|m|tib|tb|t)?\s*$", re.IGNORECASE)
_TRAILING_SIZE_RE = re.compile(r"^(.*?)[\s\-_]*(\d+(?:\.\d+)?)\s*(gib|gb|g|mib|mb|tib|tb)\s*$", re.IGNORECASE)
#: "2x RTX 3060", "2xRTX 3060", "2 * 24GiB"
_COUNT_RE = re.compile(r"^\s*(\d+)\s*[\*×x]\s*(.+)$", re.IGNORECASE)
_VENDOR_WORDS = ("nvidia", "geforce", "amd", "radeon", "intel", "apple", "tesla", "instinct")
#: include/llama.h llama_max_devices(): more GPUs than llama.cpp can use is a typo (and costs minutes).
MAX_ASSUMED_GPUS = LLAMA_MAX_DEVICES
#: The largest memory size fitplan reads (1 PiB): a larger one is not a size.
MAX_SIZE_BYTES = 1 << 50
_FAMILY_PREFIXES = ("rtx", "gtx", "rx", "arc", "mi")


def _gib_key(text: str) -> float:
    """A configuration's size as a key of the catalog's `reported_gib` ("64")."""
    gib = real_or_none(text, 0.0, MAX_SIZE_BYTES / GIB)
    if gib is None:
        raise ValueError(f"catalog: {text!r} is not a memory size in GiB")
    return gib


class AssumedGpuError(FitplanError):
    """An --assume-gpu spec that names no known GPU or has no readable size."""


#: memory kinds of the catalog (`memory_kind`)
MEMORY_KINDS = ("dedicated", "unified", "apu")
#: Linux's default GTT size: half of the RAM the OS sees (TTM's page limit)
GTT_FRACTION = 2


@dataclass(frozen=True, slots=True)
class CatalogGpu:
    name: str
    vendor: Vendor
    segment: str  # consumer, workstation, datacenter, apple, unified, apu
    memory_gib: tuple[float, ...]  # configurations sold, most common first
    aliases: tuple[str, ...] = ()
    memory_kind: str = "dedicated"  # MEMORY_KINDS (Apple: unified through the Metal working set)
    reported_gib: tuple[tuple[float, float], ...] = ()  # (configuration, what the backend reports of it)
    carve_out_gib: float = 0.0  # "apu": the firmware's VRAM carve-out
    evidence: tuple[str, ...] = ()  # public addresses of the published figures

    @property
    def unified_memory(self) -> bool:
        return self.vendor is Vendor.APPLE or self.memory_kind in ("unified", "apu")

    def reported(self, gib: float) -> float | None:
        return next((r for c, r in self.reported_gib if c == gib), None)

    @property
    def memory_bytes(self) -> int:
        """What the GPU can allocate in its most common configuration (Apple: the Metal working set)."""
        return self.assumed().memory_bytes

    def assumed(self, memory_gib: float | None = None) -> AssumedGpu:
        gib = self.memory_gib[0] if memory_gib is None else memory_gib
        ram = int(gib * GIB)
        label = f"{self.name} {gib:g} GiB"
        if self.vendor is Vendor.APPLE:
            return AssumedGpu(
                name=label,
                memory_bytes=estimated_metal_working_set(ram),
                vendor=self.vendor,
                unified_ram_bytes=ram,
            )
        reported = self.reported(gib)
        if self.memory_kind == "unified":
            seen = round((reported if reported is not None else gib) * GIB)
            return AssumedGpu(label, seen, self.vendor, unified_ram_bytes=seen, host_shared_bytes=seen)
        if self.memory_kind == "apu":
            carve = int(self.carve_out_gib * GIB)
            seen = round(reported * GIB) if reported is not None else ram - carve
            gtt = seen // GTT_FRACTION
            return AssumedGpu(label, carve + gtt, self.vendor, unified_ram_bytes=seen, host_shared_bytes=gtt)
        name = self.name if len(self.memory_gib) == 1 else label
        size = round(reported * GIB) if reported is not None else ram
        return AssumedGpu(name=name, memory_bytes=size, vendor=self.vendor)


def _memory_kind(row: dict[str, object]) -> str:
    kind = str(row.get("memory_kind", "dedicated"))
    if kind not in MEMORY_KINDS:
        raise ValueError(f"catalog: {row.get('name')!r} has an unknown memory_kind {kind!r}")
    return kind


def normalise_name(name: str) -> str:
    """Lowercase alphanumerics without vendor words: "NVIDIA GeForce RTX 4090" -> "rtx4090"."""
    words = re.findall(r"[a-z0-9]+", name.lower())
    return "".join(w for w in words if w not in _VENDOR_WORDS)


def parse_size(text: str) -> int | None:
    """Bytes of "24GiB", "24 GB", "11.5", "24576MiB"; None when it is not a size."""
    m = _SIZE_RE.match(text)
    if not m:
        return None
    x = real_or_none(m.group(1), 0, MAX_SIZE_BYTES)
    size = None if x is None else x * _UNITS[(m.group(2) or "").lower()]
    return None if size is None or size > MAX_SIZE_BYTES else int(size)


@dataclass(frozen=True, slots=True)
class GpuCatalog:
    gpus: tuple[CatalogGpu, ...]

    def __iter__(self) -> Iterator[CatalogGpu]:
        return iter(self.gpus)

    def __len__(self) -> int:
        return len(self.gpus)

    @classmethod
    def from_json(cls, text: str) -> GpuCatalog:
        doc = loads_json(text)
        out = []
        for row in doc["gpus"]:
            out.append(
                CatalogGpu(
                    name=str(row["name"]),
                    vendor=Vendor(row["vendor"]),
                    segment=str(row.get("segment", "")),
                    memory_gib=tuple(float(x) for x in row["memory_gib"]),
                    aliases=tuple(str(a) for a in row.get("aliases", ())),
                    memory_kind=_memory_kind(row),
                    reported_gib=tuple(
                        (_gib_key(k), json_real(v)) for k, v in dict(row.get("reported_gib", {})).items()
                    ),
                    carve_out_gib=json_real(row.get("carve_out_gib", 0.0)),
                    evidence=tuple(str(e) for e in row.get("evidence", ())),
                )
            )
        return cls(tuple(out))

    def _index(self) -> dict[str, list[CatalogGpu]]:
        index: dict[str, list[CatalogGpu]] = {}
        for gpu in self.gpus:
            keys = {normalise_name(gpu.name), *(normalise_name(a) for a in gpu.aliases)}
            for key in list(keys):
                for prefix in _FAMILY_PREFIXES:  # "4090" for "RTX 4090", "7900xtx" for "RX 7900 XTX"
                    if key.startswith(prefix) and is_digits(key[len(prefix) :][:1]):
                        keys.add(key[len(prefix) :])
            for key in keys:
                index.setdefault(key, []).append(gpu)
        return index

    def find(self, name: str) -> CatalogGpu | None:
        """The catalog GPU called `name` (any spelling the index knows); error if the name is ambiguous."""
        hits = self._index().get(normalise_name(name), [])
        exact = [g for g in hits if normalise_name(g.name) == normalise_name(name)]
        if len(exact) == 1:
            return exact[0]
        if len(hits) > 1:
            raise AssumedGpuError(f"{name!r} could be " + " or ".join(g.name for g in hits))
        return hits[0] if hits else None

    def search(self, text: str) -> tuple[CatalogGpu, ...]:
        """GPUs whose normalised name contains the normalised text (for pickers)."""
        key = normalise_name(text)
        return tuple(g for g in self.gpus if key in normalise_name(g.name))


@cache
def load_catalog() -> GpuCatalog:
    text = package_text("data/gpu_catalog.json")
    return GpuCatalog.from_json(text)


def parse_assumed_gpu(spec: str, catalog: GpuCatalog | None = None) -> AssumedGpu:
    """One `--assume-gpu` spec as an AssumedGpu (see the module docstring for the grammar)."""
    cat = catalog if catalog is not None else load_catalog()
    text = spec.strip()
    if not text:
        raise AssumedGpuError("empty GPU spec")
    count, text = _count_prefix(spec, text, cat)
    if "=" in text:
        return _named_size(spec, text, cat, count)
    size = parse_size(text) if _find_quiet(cat, text) is None else None
    if size is not None:
        if size <= 0:
            raise AssumedGpuError(f"{spec!r}: the memory size must be positive")
        return AssumedGpu(
            name=f"{size / GIB:g} GiB GPU", memory_bytes=size, vendor=Vendor.GENERIC, count=count
        )
    gpu = _find_quiet(cat, text)
    memory_gib: float | None = None
    if gpu is None:
        tm = _TRAILING_SIZE_RE.match(text)
        if tm:
            gpu = cat.find(tm.group(1))
            bytes_ = parse_size(tm.group(2) + tm.group(3))
            memory_gib = bytes_ / GIB if bytes_ else None
    if gpu is None:
        raise AssumedGpuError(f'{spec!r}: unknown GPU; give its memory as NAME=SIZE (e.g. "{text}=16GiB")')
    return dataclasses.replace(gpu.assumed(memory_gib), count=count)


def _count_prefix(spec: str, text: str, cat: GpuCatalog) -> tuple[int, str]:
    """ "2x RTX 3090": (2, "RTX 3090"); a name that merely starts like a count stays whole."""
    m = _COUNT_RE.match(text)
    if not m or _find_quiet(cat, text) is not None:
        return 1, text
    count = int_or_none(m.group(1), 1, MAX_ASSUMED_GPUS)
    if count is None:  # llama.cpp uses at most llama_max_devices() = 16 devices
        raise AssumedGpuError(
            f"{spec[:40]!r}: the GPU count must be 1 to {MAX_ASSUMED_GPUS} (llama.cpp's device limit)"
        )
    return count, m.group(2).strip()


def _named_size(spec: str, text: str, cat: GpuCatalog, count: int) -> AssumedGpu:
    """NAME=SIZE: the catalog's vendor (and unified memory) when it knows NAME."""
    name, _, size_text = text.partition("=")
    size = parse_size(size_text)
    if size is None or size <= 0:
        raise AssumedGpuError(f"{spec!r}: {size_text.strip()!r} is not a memory size (e.g. 24GiB)")
    gpu = _find_quiet(cat, name)
    vendor = gpu.vendor if gpu is not None else Vendor.GENERIC
    label = name.strip() or f"{size / GIB:g} GiB GPU"
    if gpu is not None and gpu.unified_memory:  # SIZE is the machine's RAM
        return dataclasses.replace(gpu.assumed(size / GIB), count=count)
    return AssumedGpu(name=label, memory_bytes=size, vendor=vendor, count=count)


_VENDOR_TITLES = {Vendor.NVIDIA: "NVIDIA", Vendor.AMD: "AMD", Vendor.INTEL: "Intel", Vendor.APPLE: "Apple"}
_SEGMENT_TITLES = {
    "consumer": "desktop and laptop",
    "workstation": "workstation",
    "datacenter": "data center",
    "apple": "Silicon (unified memory)",
}


@dataclass(frozen=True, slots=True)
class CatalogChoice:
    """One memory configuration of a catalog GPU, as a picker offers it."""

    label: str  # "GeForce RTX 3060 (12 GiB)"
    spec: str  # the `--assume-gpu` spec that reads back to it ("GeForce RTX 3060 12GB")


def catalog_groups(catalog: GpuCatalog | None = None) -> tuple[tuple[str, tuple[CatalogChoice, ...]], ...]:
    """The catalog for a picker: grouped by vendor and market ("NVIDIA desktop and laptop", "AMD data center", ...)
    in the catalog's order, each configuration a choice whose spec `parse_assumed_gpu` reads."""
    cat = catalog if catalog is not None else load_catalog()
    groups: dict[str, list[CatalogChoice]] = {}
    for gpu in cat.gpus:
        title = f"{_VENDOR_TITLES.get(gpu.vendor, gpu.vendor.value)} {_SEGMENT_TITLES.get(gpu.segment, gpu.segment)}"
        for gib in gpu.memory_gib:
            spec = gpu.name if len(gpu.memory_gib) == 1 else f"{gpu.name} {gib:g}GB"
            groups.setdefault(title.strip(), []).append(CatalogChoice(f"{gpu.name} ({gib:g} GiB)", spec))
    return tuple((title, tuple(choices)) for title, choices in groups.items())


def _find_quiet(cat: GpuCatalog, name: str) -> CatalogGpu | None:
    try:
        return cat.find(name)
    except AssumedGpuError:
        return None


def assumed_devices(
    specs: list[str] | tuple[str, ...], catalog: GpuCatalog | None = None
) -> tuple[Device, ...]:
    """Every device of every spec, in order ("2x RTX 3090" gives two)."""
    out: list[Device] = []
    for spec in specs:
        out.extend(parse_assumed_gpu(spec, catalog).devices())
    return tuple(out)
