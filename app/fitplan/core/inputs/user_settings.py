"""What the planner window remembers between runs, in one typed, versioned file.

The file is JSON at `<config dir>/settings.json`, where the config dir is platformdirs'
`user_config_dir("fitplan")`, or `$FITPLAN_CONFIG_DIR` when set (tests use it). It is written atomically (a temporary
file in the same folder, then `os.replace`). A file that cannot be parsed, or that a newer fitplan wrote
(`schema_version` above ours), is never overwritten blindly: it is renamed aside with a suffix and the defaults are
used, with a message for the user.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from fitplan.core.base.launch_settings import (
    KV_CACHE_TYPES,
    Engine,
    FlashAttn,
    LaunchSettings,
    MmprojPlacement,
)

#: Bump when a field changes meaning; adding a field with a default does not need a bump.
SCHEMA_VERSION = 1
SETTINGS_FILE = "settings.json"
ENV_CONFIG_DIR = "FITPLAN_CONFIG_DIR"
MAX_RECENT = 10
SHELLS: tuple[str, ...] = ("sh", "powershell", "cmd")
#: beellama.cpp's --kv-tail-type values ("" = its default: f16 for KVarN caches, bf16 for standard ones).
KV_TAIL_TYPES: tuple[str, ...] = ("", "f16", "bf16", "f32")


def engine_cache_types(engine: Engine) -> tuple[str, ...]:
    """`fitplan.core.engines.cache_types`, without importing it (and the GGUF tables behind it) for mainline
    llama.cpp, whose list is `KV_CACHE_TYPES`: the window reads its settings before its first paint."""
    if engine is Engine.LLAMA_CPP:
        return KV_CACHE_TYPES
    from fitplan.core.engines import cache_types

    return cache_types(engine)


class SettingsFormatError(ValueError):
    """The settings file does not have the expected shape."""


@dataclass(frozen=True, slots=True)
class ModelChoices:
    """The settings the user picked for one model (the controls of the Settings panel)."""

    n_ctx: int = 32768
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    n_parallel: int = 1
    kv_unified: bool = False
    mmproj: str = MmprojPlacement.GPU.value
    flash_attn: str = FlashAttn.AUTO.value
    n_gpu_layers: int = -1  # NGL_AUTO
    n_cpu_moe: int = 0
    n_batch: int = 2048
    n_ubatch: int = 512
    margin_mib: int = 1024
    engine: str = Engine.LLAMA_CPP.value
    # ik_llama.cpp
    mla_mode: int = 3  # -mla
    attn_max_batch_mib: int = 0  # -amb, 0 = no cap
    fused_moe: bool = True  # -fmoe
    run_time_repack: bool = False  # -rtr
    # beellama.cpp
    kv_tail_tokens: int = 0  # --kv-tail-tokens
    kv_tail_type: str = ""  # --kv-tail-type, "" = the engine's default
    # ollama
    ollama_auto_ctx: bool = False  # no num_ctx: ollama picks it from its VRAM tier
    gpu_overhead_mib: int = 0  # OLLAMA_GPU_OVERHEAD

    def to_launch_settings(self, mmproj_path: str | None = None) -> LaunchSettings:
        engine = Engine(self.engine)
        ollama = engine is Engine.OLLAMA
        return LaunchSettings(
            n_ctx=0 if ollama and self.ollama_auto_ctx else self.n_ctx,
            n_parallel=self.n_parallel,
            kv_unified=self.kv_unified,
            cache_type_k=self.cache_type_k,
            cache_type_v=self.cache_type_v,
            flash_attn=FlashAttn(self.flash_attn),
            n_batch=self.n_batch,
            n_ubatch=self.n_ubatch,
            n_gpu_layers=self.n_gpu_layers,
            n_cpu_moe=self.n_cpu_moe,
            mmproj_path=None if self.mmproj == MmprojPlacement.NONE.value else mmproj_path,
            mmproj=MmprojPlacement(self.mmproj),
            fit=False,
            engine=engine,
            mla_mode=self.mla_mode,
            attn_max_batch_mib=self.attn_max_batch_mib,
            fused_moe=self.fused_moe,
            run_time_repack=self.run_time_repack,
            kv_tail_tokens=self.kv_tail_tokens,
            kv_tail_type=self.kv_tail_type,
            gpu_overhead_bytes=self.gpu_overhead_mib << 20 if ollama else 0,
        )


@dataclass(frozen=True, slots=True)
class HypotheticalDevice:
    """A GPU the user added by hand ("what if I had a 24 GiB card")."""

    name: str
    total_bytes: int
    vendor: str = "nvidia"


@dataclass(frozen=True, slots=True)
class UserSettings:
    schema_version: int = SCHEMA_VERSION
    window_geometry: str = ""  # QWidget.saveGeometry(), base64
    window_state: str = ""  # QMainWindow.saveState(), base64
    model_choices: Mapping[str, ModelChoices] = field(default_factory=dict)  # by model path or URL
    folders: tuple[str, ...] = ()  # library folders the user added
    hypothetical_devices: tuple[HypotheticalDevice, ...] = ()
    planned_devices: tuple[str, ...] | None = None  # device names to plan for; None = every device
    recent_files: tuple[str, ...] = ()  # newest first, at most MAX_RECENT
    shell: str = "sh"
    llama_bin_dir: str = ""  # a local llama.cpp build's bin folder, for "verify with llama.cpp"
    last_model: str = ""

    def with_recent(self, path: str) -> UserSettings:
        recent = (path, *(p for p in self.recent_files if p != path))[:MAX_RECENT]
        return replace(self, recent_files=recent, last_model=path)

    def with_choices(self, path: str, choices: ModelChoices) -> UserSettings:
        merged = dict(self.model_choices)
        merged[path] = choices
        return replace(self, model_choices=merged)

    def choices_for(self, path: str) -> ModelChoices:
        return self.model_choices.get(path, ModelChoices())


@dataclass(frozen=True, slots=True)
class LoadResult:
    settings: UserSettings
    message: str | None = None  # for the user: why the saved settings were set aside
    set_aside: Path | None = None


def config_dir() -> Path:
    env = os.environ.get(ENV_CONFIG_DIR)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_config_dir("fitplan", appauthor=False))


def settings_path(directory: Path | None = None) -> Path:
    return (directory or config_dir()) / SETTINGS_FILE


def _to_json(settings: UserSettings) -> dict[str, Any]:
    data = asdict(settings)
    data["model_choices"] = {k: asdict(v) for k, v in settings.model_choices.items()}
    return data


def _expect(value: object, kind: type | tuple[type, ...], key: str) -> Any:
    if isinstance(value, bool) and kind in (int, float):
        raise SettingsFormatError(f"{key}: expected {kind}, got a boolean")
    if not isinstance(value, kind):
        raise SettingsFormatError(f"{key}: expected {kind}, got {type(value).__name__}")
    return value


def _str_tuple(value: object, key: str) -> tuple[str, ...]:
    items = _expect(value, list, key)
    return tuple(_expect(v, str, key) for v in items)


def _choices_from(raw: object, key: str) -> ModelChoices:
    obj = _expect(raw, dict, key)
    defaults = ModelChoices()
    kwargs: dict[str, Any] = {}
    for name in ModelChoices.__dataclass_fields__:
        if name in obj:
            kwargs[name] = _expect(obj[name], type(getattr(defaults, name)), f"{key}.{name}")
    choices = ModelChoices(**kwargs)
    try:
        FlashAttn(choices.flash_attn)
        MmprojPlacement(choices.mmproj)
        engine = Engine(choices.engine)
    except ValueError as exc:
        raise SettingsFormatError(f"{key}: {exc}") from exc
    allowed = engine_cache_types(engine)
    if choices.cache_type_k not in allowed or choices.cache_type_v not in allowed:
        raise SettingsFormatError(f"{key}: unknown KV cache type for {engine.value}")
    if choices.mla_mode not in (0, 1, 2, 3):
        raise SettingsFormatError(f"{key}: -mla must be 0-3, got {choices.mla_mode}")
    if choices.kv_tail_type not in KV_TAIL_TYPES:
        raise SettingsFormatError(f"{key}: unknown KV tail type {choices.kv_tail_type!r}")
    return choices


def _from_json(data: object) -> UserSettings:
    obj = _expect(data, dict, "settings")
    d = UserSettings()
    version = _expect(obj.get("schema_version"), int, "schema_version")
    choices_raw = _expect(obj.get("model_choices", {}), dict, "model_choices")
    devices = []
    for i, raw in enumerate(_expect(obj.get("hypothetical_devices", []), list, "hypothetical_devices")):
        dev = _expect(raw, dict, f"hypothetical_devices[{i}]")
        devices.append(
            HypotheticalDevice(
                name=_expect(dev.get("name"), str, "name"),
                total_bytes=_expect(dev.get("total_bytes"), int, "total_bytes"),
                vendor=_expect(dev.get("vendor", "nvidia"), str, "vendor"),
            )
        )
    planned_raw = obj.get("planned_devices")
    shell = _expect(obj.get("shell", d.shell), str, "shell")
    return UserSettings(
        schema_version=version,
        window_geometry=_expect(obj.get("window_geometry", ""), str, "window_geometry"),
        window_state=_expect(obj.get("window_state", ""), str, "window_state"),
        model_choices={_expect(k, str, "model_choices"): _choices_from(v, k) for k, v in choices_raw.items()},
        folders=_str_tuple(obj.get("folders", []), "folders"),
        hypothetical_devices=tuple(devices),
        planned_devices=None if planned_raw is None else _str_tuple(planned_raw, "planned_devices"),
        recent_files=_str_tuple(obj.get("recent_files", []), "recent_files")[:MAX_RECENT],
        shell=shell if shell in SHELLS else d.shell,
        llama_bin_dir=_expect(obj.get("llama_bin_dir", ""), str, "llama_bin_dir"),
        last_model=_expect(obj.get("last_model", ""), str, "last_model"),
    )


def _set_aside(path: Path, suffix: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.{suffix}-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.{suffix}-{stamp}-{n}")
    os.replace(path, target)
    return target


def load_user_settings(directory: Path | None = None) -> LoadResult:
    """Read the settings; a missing file gives the defaults, a bad or newer one is set aside (never raises)."""
    path = settings_path(directory)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return LoadResult(UserSettings())
    except (OSError, UnicodeDecodeError) as exc:
        try:
            aside = _set_aside(path, "unreadable")
        except OSError:
            return LoadResult(UserSettings(), f"Could not read saved settings ({exc}); using defaults.")
        return LoadResult(UserSettings(), f"Saved settings could not be read ({exc}); moved to {aside.name}.", aside)
    try:
        data = json.loads(text)
        version = data.get("schema_version") if isinstance(data, dict) else None
        if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
            aside = _set_aside(path, f"v{version}")
            return LoadResult(
                UserSettings(),
                f"Saved settings were written by a newer fitplan (schema {version}, this one reads {SCHEMA_VERSION});"
                f" kept as {aside.name}, starting with defaults.",
                aside,
            )
        settings = _from_json(data)
    except (ValueError, SettingsFormatError) as exc:
        try:
            aside = _set_aside(path, "corrupt")
        except OSError:
            return LoadResult(UserSettings(), f"Saved settings are damaged ({exc}); using defaults.")
        return LoadResult(UserSettings(), f"Saved settings were damaged ({exc}); moved to {aside.name}.", aside)
    return LoadResult(replace(settings, schema_version=SCHEMA_VERSION))


def save_user_settings(settings: UserSettings, directory: Path | None = None) -> Path:
    """Write atomically: a temporary file next to the target, flushed, then renamed over it."""
    path = settings_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps(_to_json(replace(settings, schema_version=SCHEMA_VERSION)), indent=2, sort_keys=True)
    fd, tmp = tempfile.mkstemp(prefix=".settings-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
