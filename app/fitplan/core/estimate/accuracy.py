"""How far the estimate was from llama.cpp on recorded configurations like the user's: the measured error band.

The figures come from `tools/accuracy_report.py --write`, which compares the estimate with every llama.cpp
recording in `tests/fixtures/llamacpp/` and writes them to `fitplan/data/accuracy_bands.json` next to
`docs/accuracy.md`: per architecture and configuration class, the number of recorded cases, the range of the
compute error and how many had the weights and the K/V cache exact. The configuration class of a recording and of
the user's settings is the same function, `configuration_class`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache

from fitplan.core.base.devices import Device, DeviceKind, Vendor
from fitplan.core.base.files import package_text
from fitplan.core.base.launch_settings import Engine
from fitplan.core.base.results import Estimate, TermKind
from fitplan.core.gguf.ggml_types import is_quantized_cache_type
from fitplan.core.memory.weights import CUDA_VENDORS
from fitplan.core.model.profile import ModelProfile

#: Where the bands are, inside the package.
DATA_PATH = "data/accuracy_bands.json"


@dataclass(frozen=True, slots=True)
class ConfigClass:
    """The configuration class a recording or the user's settings belong to: the settings the compute model
    treats differently, which the recordings tell apart."""

    flash_attn: bool  # resolved: flash attention on
    quantized_cache: bool  # K or V cache of a quantized type
    split: bool  # the model runs on more than one device (layers or experts on several GPUs or the host)

    @property
    def key(self) -> str:
        """The class's key in the data file ("fa-on/kv-f16/one-device")."""
        fa = "fa-on" if self.flash_attn else "fa-off"
        kv = "kv-quantized" if self.quantized_cache else "kv-f16"
        return f"{fa}/{kv}/{'split' if self.split else 'one-device'}"

    @property
    def label(self) -> str:
        """In words: "flash attention on, f16 cache, one device"."""
        fa = "flash attention on" if self.flash_attn else "flash attention off"
        kv = "quantized cache" if self.quantized_cache else "f16 cache"
        return f"{fa}, {kv}, {'split over devices' if self.split else 'one device'}"


def configuration_class(profile: ModelProfile, est: Estimate) -> ConfigClass:
    """The class of one estimated configuration (the report classifies each recording with this function)."""
    s = est.settings
    quantized = any(is_quantized_cache_type(t) for t in (s.cache_type_k, s.cache_type_v))
    gpus = [
        d for d in est.devices if d.device.kind is not DeviceKind.CPU and d.bytes_of(TermKind.WEIGHTS) > 0
    ]
    if not gpus:
        split = False  # everything on the host
    elif len(gpus) > 1:
        split = True
    else:
        all_layers = est.context.n_gpu_layers >= profile.n_layer_all + 1
        moved = s.cpu_moe or s.n_cpu_moe > 0 or bool(s.tensor_overrides) or s.no_kv_offload
        split = moved or not all_layers
    return ConfigClass(flash_attn=est.context.flash_attn, quantized_cache=quantized, split=split)


@dataclass(frozen=True, slots=True)
class BandFigures:
    """What the recordings of one architecture (or all) in one class showed."""

    cases: int
    compute_min_pct: float  # the estimate's compute error, (estimate - recorded) / recorded, in percent
    compute_max_pct: float
    kv_exact: int  # cases with the K/V cache and recurrent state byte-exact on every device
    weights_exact: int | None = None  # cases with the weights exact to the MiB; None: weights not recorded

    @property
    def range_text(self) -> str:
        return f"{self.compute_min_pct:+.1f}%..{self.compute_max_pct:+.1f}%"

    @property
    def exact_text(self) -> str:
        if self.weights_exact is None:
            kv = "all" if self.kv_exact == self.cases else f"{self.kv_exact} of {self.cases}"
            return f"K/V exact on {kv} (weights not recorded)"
        if self.weights_exact == self.kv_exact == self.cases:
            return "weights and K/V exact on all"
        return f"weights exact on {self.weights_exact}, K/V on {self.kv_exact} of {self.cases}"

    def configurations(self) -> str:
        return f"{self.cases} recorded configuration{'s' if self.cases != 1 else ''}"


class BandScope(StrEnum):
    ARCHITECTURE = "architecture"  # recordings of the user's architecture in the user's class
    ALL = "all architectures"  # none of the architecture in this class: the figures of every architecture
    NONE = "none"  # nothing recorded for this engine, architecture or class


@dataclass(frozen=True, slots=True)
class AccuracyBand:
    """The measured error band for one model and configuration, and how to say it."""

    architecture: str
    engine: Engine
    config: ConfigClass
    scope: BandScope
    figures: BandFigures | None  # None when scope is NONE
    architecture_recorded: bool  # the engine's recordings include the architecture (in some class)
    measurement: str  # how the engine's figures were measured ("" when it has no recordings)
    note: str = ""  # what else is known of the engine's accuracy
    backend: str = ""  # the GPU backend the figures were measured on ("cuda"); "" = the CPU recordings

    @property
    def text(self) -> str:
        """One line: "compute: within -0.1%..+3.7% on 24 recorded configurations of qwen3moe (...)"."""
        f = self.figures
        fork = "" if self.engine is Engine.LLAMA_CPP else f" on {self.engine.value}"
        if self.backend:
            fork += f" on {BACKEND_WORDS[self.backend]}"
        if self.scope is BandScope.ARCHITECTURE and f is not None:
            return (
                f"compute: within {f.range_text} on {f.configurations()} of {self.architecture}{fork} "
                f"({self.config.label}); {f.exact_text}"
            )
        if self.scope is BandScope.ALL and f is not None:
            which = (
                f"no recordings of {self.architecture} with {self.config.label}"
                if self.architecture_recorded
                else "no recordings of this architecture"
            )
            return (
                f"compute: {which}; across all architectures ({self.config.label}): within {f.range_text} "
                f"on {f.configurations()}; {f.exact_text}"
            )
        if not self.measurement:
            return f"compute: no error band recorded for {self.engine.value}; {self.note}"
        if self.engine is Engine.LLAMA_CPP:
            return f"compute: no recordings of any architecture with {self.config.label}"
        if self.architecture_recorded:
            return f"compute: no recordings of {self.architecture}{fork} with {self.config.label}"
        return (
            f"compute: no recordings of {self.architecture}{fork}; llama.cpp's band is not claimed for a fork"
        )

    @property
    def tooltip(self) -> str:
        """How the band was measured."""
        lines = ["How close the estimate came to the engine on recorded configurations like this one."]
        if self.measurement:
            lines += [
                f"Measured: {self.measurement}.",
                "Compute error: (estimate - recorded) / recorded compute buffers, summed over the devices.",
                "A class is flash attention on or off, an f16 or quantized K/V cache, one device or a split.",
            ]
        if self.engine is not Engine.LLAMA_CPP:
            lines.append(f"{self.engine.value} is a fork: llama.cpp's band is not claimed for it.")
        if self.note:
            lines.append(self.note[:1].upper() + self.note[1:] + ".")
        return "\n".join(lines)


def _figures(d: dict[str, dict[str, object]]) -> dict[str, BandFigures]:
    return {k: BandFigures(**v) for k, v in d.items()}  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class EngineAccuracy:
    """One engine's part of the data file: its figures per architecture and class key, and across all
    architectures (empty where one architecture's figures must not stand for the others)."""

    measurement: str
    note: str
    architectures: dict[str, dict[str, BandFigures]]
    all_architectures: dict[str, BandFigures]
    #: the same figures measured on a GPU backend ("cuda": device-shaped stand-ins of ggml-cuda)
    backends: dict[str, EngineAccuracy] = field(default_factory=dict)

    @staticmethod
    def from_doc(doc: dict[str, object]) -> EngineAccuracy:
        archs = doc.get("architectures") or {}
        every = doc.get("all") or {}
        backends = doc.get("backends") or {}
        assert isinstance(archs, dict) and isinstance(every, dict) and isinstance(backends, dict)
        return EngineAccuracy(
            measurement=str(doc.get("measurement", "")),
            note=str(doc.get("note", "")),
            architectures={str(a): _figures(c) for a, c in archs.items()},
            all_architectures=_figures(every),
            backends={str(k): EngineAccuracy.from_doc(v) for k, v in backends.items()},
        )


@dataclass(frozen=True, slots=True)
class AccuracyData:
    """The data file: one `EngineAccuracy` per engine name."""

    engines: dict[str, EngineAccuracy]

    @staticmethod
    def from_json(text: str) -> AccuracyData:
        doc = json.loads(text)
        return AccuracyData({str(k): EngineAccuracy.from_doc(v) for k, v in doc["engines"].items()})


@cache
def load_accuracy_data() -> AccuracyData:
    text = package_text(DATA_PATH)
    return AccuracyData.from_json(text)


_NOTHING = EngineAccuracy("", "no recordings of it", {}, {})


#: How a band's backend is named in its text.
BACKEND_WORDS = {"cuda": "CUDA/ROCm stand-ins", "vulkan": "Vulkan stand-ins", "metal": "Metal stand-ins"}


def device_backend(device: Device) -> str | None:
    """The stand-in recordings that stand for a GPU, by the backend it is planned with (`gpu_backend`): "cuda"
    for ggml-cuda's makes (`CUDA_VENDORS`: NVIDIA, AMD, unknown make), "metal" for Apple's GPU, "vulkan" for the
    others (Intel); None for the host and RPC devices (the CPU recordings with loopback servers)."""
    if device.kind is DeviceKind.CPU or device.vendor in (Vendor.RPC, Vendor.HOST):
        return None
    if device.vendor in CUDA_VENDORS:
        return "cuda"
    return "metal" if device.vendor is Vendor.APPLE else "vulkan"


def estimate_backend(est: Estimate) -> str:
    """The backend whose recordings the estimate's band comes from: that of the first GPU that holds part of the
    model or computes (`device_backend`: "cuda", "vulkan" or "metal"), else "cpu". Where the data file has no
    figures of that backend the CPU recordings stand for it (`accuracy_band`)."""
    for d in est.devices:
        backend = device_backend(d.device)
        if backend and (d.bytes_of(TermKind.WEIGHTS) or d.bytes_of(TermKind.COMPUTE)):
            return backend
    return "cpu"


def accuracy_band(profile: ModelProfile, est: Estimate, data: AccuracyData | None = None) -> AccuracyBand:
    """The measured error band of the profile's architecture in the estimate's configuration class, for the
    estimate's engine; across all architectures when the architecture has no recording in that class (where the
    engine's recordings allow it); none when nothing like it was recorded."""
    d = data if data is not None else load_accuracy_data()
    arch = profile.architecture
    config = configuration_class(profile, est)
    engine = est.settings.engine
    e = d.engines.get(engine.value, _NOTHING)
    backend = estimate_backend(est)
    # the backend's own figures where the data file has them, else the CPU recordings' (and the text says so)
    shown = backend if backend in e.backends and backend in BACKEND_WORDS else ""
    if shown:
        e = e.backends[shown]
    recorded = arch in e.architectures

    def band(scope: BandScope, figures: BandFigures | None) -> AccuracyBand:
        return AccuracyBand(
            arch,
            engine,
            config,
            scope,
            figures,
            recorded,
            e.measurement,
            e.note,
            shown,
        )

    own = e.architectures.get(arch, {}).get(config.key)
    if own is not None:
        return band(BandScope.ARCHITECTURE, own)
    every = e.all_architectures.get(config.key)
    return band(BandScope.ALL, every) if every is not None else band(BandScope.NONE, None)
