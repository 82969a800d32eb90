"""What the planner window remembers between runs, in one typed, versioned file.

The file is JSON at `<config dir>/settings.json`, where the config dir is platformdirs'
`user_config_dir("fitplan")`, or `$FITPLAN_CONFIG_DIR` when set (tests use it). Nothing the user set is lost or
silently reset:

* loading reads only a regular file of at most MAX_SETTINGS_BYTES (a FIFO or device does not hang it) and never
  raises; each field is validated on its own (type, range, known value): a bad one takes its default, the message
  names it and a copy of the file as it was is kept next to it;
* a file that is not a JSON object at all, or that a newer fitplan wrote (`schema_version` above ours), is renamed
  aside with a suffix and the defaults are used, with a message;
* saving re-reads the file under a lock and applies this process's changes since it last read or wrote it
  (`merge_settings`), so two windows saving at once keep each other's folders; the write is atomic (a temporary
  file in the same folder, then `os.replace`); a folder that cannot be written raises `SettingsSaveError`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from fitplan.core.base.errors import SettingsSaveError
from fitplan.core.base.files import NotRegularFileError, read_regular_file
from fitplan.core.base.launch_settings import (
    KV_CACHE_TYPES,
    NGL_AUTO,
    DraftSettings,
    Engine,
    FlashAttn,
    LaunchSettings,
    MmprojPlacement,
)
from fitplan.core.base.numbers import loads_json
from fitplan.core.plan.usage import DEFAULT_MARGIN_MIB

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

    n_ctx: int = 32768  # DEFAULT_CONTEXT
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    n_parallel: int = 1
    kv_unified: bool = False
    mmproj: str = MmprojPlacement.GPU.value
    image_max_tokens: int = -1  # --image-max-tokens: the projector's largest image, <= 0 = its own limit
    flash_attn: str = FlashAttn.AUTO.value
    n_gpu_layers: int = -1  # NGL_AUTO
    n_cpu_moe: int = 0
    n_batch: int = 2048
    n_ubatch: int = 512
    margin_mib: int = DEFAULT_MARGIN_MIB
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
    no_kv_offload: bool = False  # -nkvo (not an ollama setting)
    # a draft model for speculative decoding (-md, not an ollama setting); "" = none
    draft_model: str = ""
    draft_n_gpu_layers: int = NGL_AUTO  # -ngld
    draft_cache_type_k: str = "f16"  # -ctkd
    draft_cache_type_v: str = "f16"  # -ctvd
    #: flags no control holds, kept from a command or preset pasted for this model (argv words, editable):
    #: those fitplan models are planned (`read_extra_flags`), the others go into the command as given
    extra_args: tuple[str, ...] = ()

    def draft_settings(self) -> DraftSettings | None:
        if not self.draft_model or Engine(self.engine) is Engine.OLLAMA:
            return None
        return DraftSettings(
            self.draft_model, self.draft_n_gpu_layers, self.draft_cache_type_k, self.draft_cache_type_v
        )

    def to_launch_settings(self, mmproj_path: str | None = None) -> LaunchSettings:
        engine = Engine(self.engine)
        ollama = engine is Engine.OLLAMA
        return LaunchSettings(
            **{name: getattr(self, name) for name in SAME_AS_SETTINGS},
            n_ctx=0 if ollama and self.ollama_auto_ctx else self.n_ctx,
            n_parallel=self.n_parallel,
            kv_unified=self.kv_unified,
            flash_attn=FlashAttn(self.flash_attn),
            mmproj_path=None if self.mmproj == MmprojPlacement.NONE.value else mmproj_path,
            mmproj=MmprojPlacement(self.mmproj),
            fit=False,
            engine=engine,
            gpu_overhead_bytes=self.gpu_overhead_mib << 20 if ollama else 0,
            no_kv_offload=self.no_kv_offload and not ollama,
            draft=self.draft_settings(),
        )


#: The choices that are the `LaunchSettings` field of the same name, value for value.
SAME_AS_SETTINGS = (
    "cache_type_k", "cache_type_v", "n_batch", "n_ubatch", "n_gpu_layers", "n_cpu_moe", "mla_mode",
    "attn_max_batch_mib", "fused_moe", "run_time_repack", "kv_tail_tokens", "kv_tail_type", "image_max_tokens",
)  # fmt: skip

#: The context a model opens with when nothing was chosen for it (capped at its training length).
DEFAULT_CONTEXT = 32768
MIN_CONTEXT = 256


def default_choices(n_ctx_train: int) -> ModelChoices:
    """The choices of a model opened for the first time: the default context, capped by its training length."""
    return ModelChoices(n_ctx=min(DEFAULT_CONTEXT, max(MIN_CONTEXT, n_ctx_train)))


def choices_from_settings(s: LaunchSettings, current: ModelChoices) -> ModelChoices:
    """The choices that launch settings read from a command or a preset stand for (what they do not say stays as
    `current` has it: the margin). The settings no choice holds are `unheld_flags`."""
    draft = s.draft
    return replace(
        current,
        **{name: getattr(s, name) for name in SAME_AS_SETTINGS},
        kv_unified=bool(s.kv_unified),
        n_ctx=s.n_ctx if s.n_ctx > 0 else current.n_ctx,
        n_parallel=max(1, s.n_parallel),
        mmproj=s.mmproj.value,
        flash_attn=s.flash_attn.value,
        engine=s.engine.value,
        ollama_auto_ctx=s.engine is Engine.OLLAMA and s.n_ctx <= 0,
        no_kv_offload=s.no_kv_offload,
        draft_model=draft.model_path if draft is not None else "",
        draft_n_gpu_layers=max(-1, draft.n_gpu_layers) if draft is not None else current.draft_n_gpu_layers,
        draft_cache_type_k=draft.cache_type_k if draft is not None else current.draft_cache_type_k,
        draft_cache_type_v=draft.cache_type_v if draft is not None else current.draft_cache_type_v,
    )


#: The settings `ModelChoices` holds (as `written_flags` names them), and those a front end keeps beside them
#: (the model, its devices, the projector found next to it).
_HELD = frozenset(
    {
        "model", "devices", "mmproj_path", "fit", "engine", "n_ctx", "n_parallel", "kv_unified", "cache_type_k",
        "cache_type_v", "flash_attn", "n_batch", "n_ubatch", "n_gpu_layers", "n_cpu_moe", "mmproj", "mla_mode",
        "attn_max_batch_mib", "fused_moe", "run_time_repack", "kv_tail_tokens", "kv_tail_type",
        "gpu_overhead_bytes", "no_kv_offload", "draft.model_path", "draft.n_gpu_layers", "draft.cache_type_k",
        "draft.cache_type_v", "image_max_tokens",
    }
)  # fmt: skip


def unheld_flags(s: LaunchSettings) -> tuple[str, ...]:
    """The argv words of the settings no model choice holds (`--no-op-offload`, `-nr`, `--swa-full`, `-ot` ...):
    parsed onto the choices' settings (`with_unheld`), the plan launches everything a command or preset said."""
    from fitplan.core.launch.flags import written_flags

    words: list[str] = []
    for w in written_flags(s):
        if w.key not in _HELD:
            words += [w.flag] if w.value is None else [w.flag, w.value]
    return tuple(words)


@dataclass(frozen=True, slots=True)
class ExtraFlags:
    """A model's extra flags (`ModelChoices.extra_args`) read back: the planned and the kept."""

    planned: tuple[
        str, ...
    ] = ()  # change memory as fitplan models it (`--no-op-offload`, `-ot`): `with_unheld`
    kept: tuple[str, ...] = ()  # written into the command as given (`--alias`, `--jinja`, unmodelled flags)

    @property
    def pins(self) -> frozenset[str]:
        """The settings the planned flags pin (the plan keeps them as given)."""
        from fitplan.core.launch.command_line import given_keys

        return given_keys(self.planned)


def read_extra_flags(words: tuple[str, ...], engine: Engine) -> ExtraFlags:
    """Extra flags as llama-server reads them for `engine`; a flag that a control holds (-c, -ngl, -m ...) is a
    one-line `FlagError` naming it: it is set with its control, so that no setting is said twice."""
    if not words:
        return ExtraFlags()  # without importing the flag table (the window reads none before its first paint)
    from fitplan.core.base.errors import FlagError
    from fitplan.core.launch.flags import parse_flags, written_flags

    parsed = parse_flags(list(words), engine=engine)
    base = {(w.flag, w.value) for w in written_flags(parse_flags([], engine=engine).settings)}
    held = [
        w.flag for w in written_flags(parsed.settings) if w.key in _HELD and (w.flag, w.value) not in base
    ]
    if parsed.model_path:
        held.insert(0, "-m")
    if held:
        raise FlagError(f"{', '.join(dict.fromkeys(held))}: set with the controls, not as extra flags")
    return ExtraFlags(unheld_flags(parsed.settings), parsed.passthrough)


def with_unheld(settings: LaunchSettings, words: tuple[str, ...]) -> LaunchSettings:
    """`settings` with the `unheld_flags` words applied."""
    if not words:
        return settings
    from fitplan.core.launch.flags import parse_flags

    return parse_flags(list(words), base=settings, engine=settings.engine).settings


@dataclass(frozen=True, slots=True)
class HypotheticalDevice:
    """A GPU the user added by hand ("what if I had a 24 GiB card")."""

    name: str
    total_bytes: int
    vendor: str = "nvidia"
    host_shared_bytes: int = (
        0  # the part of total_bytes that is host RAM (a unified-memory machine, an APU's GTT)
    )


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
    host_ram_gib: int = 0  # system RAM to plan for (a hypothetical machine's); 0 = as detected
    launch_devices: tuple[str, ...] | None = None  # -dev: llama.cpp device names; None = all, () = none

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
    # a discrete card is written as before shared memory existed (no host_shared_bytes key)
    data["hypothetical_devices"] = [
        {k: v for k, v in asdict(d).items() if k != "host_shared_bytes" or v}
        for d in settings.hypothetical_devices
    ]
    return data


#: Bounds of the numeric model choices (the window's spin boxes hold 32-bit ints; llama.cpp's flags too).
INT32_MAX = 2**31 - 1
CHOICE_RANGES: dict[str, tuple[int, int]] = {
    "n_ctx": (0, INT32_MAX),
    "n_parallel": (1, 65536),
    "n_gpu_layers": (-1, 65536),
    "n_cpu_moe": (0, 65536),
    "n_batch": (1, INT32_MAX),
    "n_ubatch": (1, INT32_MAX),
    "margin_mib": (0, INT32_MAX),
    "mla_mode": (0, 3),
    "attn_max_batch_mib": (0, INT32_MAX),
    "kv_tail_tokens": (0, INT32_MAX),
    "gpu_overhead_mib": (0, INT32_MAX),
    "draft_n_gpu_layers": (-1, 65536),
    "host_ram_gib": (0, 4096),
}
#: The largest settings file read (real ones are a few kB).
MAX_SETTINGS_BYTES = 16 * 1024 * 1024
_MAX_PROBLEMS_SHOWN = 3


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Fields:
    """Per-field reading of a settings document: a field that is missing takes its default; one of the wrong type
    or out of range takes its default and is recorded in `problems` (the rest of the file is kept)."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def bad(self, key: str, value: object) -> None:
        self.problems.append(f"{key} = {_show(value)}")

    def get(self, obj: Mapping[str, object], name: str, default: Any, key: str) -> Any:
        if name not in obj:
            return default
        value = obj[name]
        if not _same_kind(value, default):
            self.bad(key, value)
            return default
        lo_hi = (
            CHOICE_RANGES.get(name) if isinstance(default, int) and not isinstance(default, bool) else None
        )
        if lo_hi is not None and not lo_hi[0] <= value <= lo_hi[1]:  # type: ignore[operator]
            self.bad(key, value)
            return default
        return value

    def strings(self, value: object, key: str) -> tuple[str, ...]:
        if not isinstance(value, list):
            self.bad(key, value)
            return ()
        good = tuple(v for v in value if isinstance(v, str))
        if len(good) != len(value):
            self.bad(key, next(v for v in value if not isinstance(v, str)))
        return good


def _same_kind(value: object, default: object) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    return isinstance(value, type(default))


def _choices_from(raw: object, key: str, f: _Fields) -> ModelChoices | None:
    if not isinstance(raw, dict):
        f.bad(key, raw)
        return None
    d = ModelChoices()
    kw: dict[str, Any] = {
        n: f.get(raw, n, getattr(d, n), f"{key}.{n}")
        for n in ModelChoices.__dataclass_fields__
        if n != "extra_args"  # a list of strings in the file
    }
    kw["extra_args"] = f.strings(raw.get("extra_args", []), f"{key}.extra_args")
    for name, kind in (("flash_attn", FlashAttn), ("mmproj", MmprojPlacement), ("engine", Engine)):
        if kw[name] not in {e.value for e in kind}:
            f.bad(f"{key}.{name}", kw[name])
            kw[name] = getattr(d, name)
    allowed = engine_cache_types(Engine(kw["engine"]))
    for name in ("cache_type_k", "cache_type_v"):
        if kw[name] not in allowed:
            f.bad(f"{key}.{name}", kw[name])
            kw[name] = getattr(d, name)
    for name in ("draft_cache_type_k", "draft_cache_type_v"):
        if kw[name] not in allowed:
            f.bad(f"{key}.{name}", kw[name])
            kw[name] = getattr(d, name)
    if kw["kv_tail_type"] not in KV_TAIL_TYPES:
        f.bad(f"{key}.kv_tail_type", kw["kv_tail_type"])
        kw["kv_tail_type"] = d.kv_tail_type
    return ModelChoices(**kw)


def _device_from(raw: object, key: str, f: _Fields) -> HypotheticalDevice | None:
    if not isinstance(raw, dict):
        f.bad(key, raw)
        return None
    name, total, vendor = raw.get("name"), raw.get("total_bytes"), raw.get("vendor", "nvidia")
    if (
        not isinstance(name, str)
        or not isinstance(total, int)
        or isinstance(total, bool)
        or not isinstance(vendor, str)
    ):
        f.bad(key, raw)
        return None
    if not 0 < total < 2**60:
        f.bad(f"{key}.total_bytes", total)
        return None
    shared = raw.get("host_shared_bytes", 0)
    if not isinstance(shared, int) or isinstance(shared, bool) or not 0 <= shared <= total:
        f.bad(f"{key}.host_shared_bytes", shared)
        shared = 0
    return HypotheticalDevice(name=name, total_bytes=total, vendor=vendor, host_shared_bytes=shared)


def _from_json(data: object) -> tuple[UserSettings, list[str]]:
    """The settings of a parsed document, field by field, and the fields that were not valid (their defaults
    are used). Raises SettingsFormatError only when the document is not an object at all."""
    if not isinstance(data, dict):
        raise SettingsFormatError(f"settings: expected an object, got {type(data).__name__}")
    f = _Fields()
    d = UserSettings()
    f.get(data, "schema_version", SCHEMA_VERSION, "schema_version")
    choices: dict[str, ModelChoices] = {}
    raw_choices = f.get(data, "model_choices", {}, "model_choices")
    for k, v in raw_choices.items():
        c = _choices_from(v, f"model_choices[{_show(k)}]", f)
        if c is not None:
            choices[str(k)] = c
    devices = []
    for i, raw in enumerate(f.get(data, "hypothetical_devices", [], "hypothetical_devices")):
        dev = _device_from(raw, f"hypothetical_devices[{i}]", f)
        if dev is not None:
            devices.append(dev)
    planned_raw = data.get("planned_devices")
    launch_raw = data.get("launch_devices")
    shell = f.get(data, "shell", d.shell, "shell")
    if shell not in SHELLS:
        f.bad("shell", shell)
        shell = d.shell
    settings = UserSettings(
        schema_version=SCHEMA_VERSION,
        window_geometry=f.get(data, "window_geometry", "", "window_geometry"),
        window_state=f.get(data, "window_state", "", "window_state"),
        model_choices=choices,
        folders=f.strings(data.get("folders", []), "folders"),
        hypothetical_devices=tuple(devices),
        planned_devices=None if planned_raw is None else f.strings(planned_raw, "planned_devices"),
        recent_files=f.strings(data.get("recent_files", []), "recent_files")[:MAX_RECENT],
        shell=shell,
        llama_bin_dir=f.get(data, "llama_bin_dir", "", "llama_bin_dir"),
        last_model=f.get(data, "last_model", "", "last_model"),
        host_ram_gib=f.get(data, "host_ram_gib", d.host_ram_gib, "host_ram_gib"),
        launch_devices=None if launch_raw is None else f.strings(launch_raw, "launch_devices"),
    )
    return settings, f.problems


def _set_aside(path: Path, suffix: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.{suffix}-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.{suffix}-{stamp}-{n}")
    os.replace(path, target)
    return target


def _keep_copy(path: Path, data: bytes, suffix: str) -> Path | None:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.{suffix}-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.{suffix}-{stamp}-{n}")
    try:
        target.write_bytes(data)
    except OSError:
        return None
    return target


def _parse(data: bytes) -> object:
    return loads_json(data.decode("utf-8"))


def load_user_settings(directory: Path | None = None) -> LoadResult:
    """Read the settings; never raises. A missing file gives the defaults. A file that is not a JSON object (or
    is not a regular file, or is too large) or that a newer fitplan wrote is set aside with a message. A field of
    the wrong type or out of range takes its default, with a message naming it, and a copy of the file is kept."""
    path = settings_path(directory)
    try:
        data = read_regular_file(path, MAX_SETTINGS_BYTES)
    except FileNotFoundError:
        return _loaded(path, LoadResult(UserSettings()))
    except (NotRegularFileError, ValueError) as exc:  # a folder, FIFO or device, or too large: never readable
        return _loaded(path, _aside(path, "unreadable", f"Saved settings could not be read ({exc})"))
    except OSError as exc:  # EMFILE, EACCES, EIO...: may pass; the file stays, and a save merges into it
        return _loaded(
            path,
            LoadResult(
                UserSettings(),
                f"Saved settings could not be read now ({exc.strerror or exc}); they are"
                " kept as they are, and changes made now are added to them when they can be read again.",
            ),
        )
    try:
        doc = _parse(data)
        version = doc.get("schema_version") if isinstance(doc, dict) else None
        if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
            aside = _set_aside(path, f"v{version}")
            return LoadResult(
                UserSettings(),
                f"Saved settings were written by a newer fitplan (schema {version}, this one reads {SCHEMA_VERSION});"
                f" kept as {aside.name}, starting with defaults.",
                aside,
            )
        settings, problems = _from_json(doc)
    except (ValueError, SettingsFormatError) as exc:
        return _loaded(path, _aside(path, "corrupt", f"Saved settings were damaged ({exc})"))
    except OSError as exc:
        return _loaded(path, LoadResult(UserSettings(), f"Saved settings could not be set aside ({exc})."))
    if not problems:
        return _loaded(path, LoadResult(settings))
    copy = _keep_copy(path, data, "invalid")
    shown = ", ".join(problems[:_MAX_PROBLEMS_SHOWN]) + (
        f" and {len(problems) - _MAX_PROBLEMS_SHOWN} more" if len(problems) > _MAX_PROBLEMS_SHOWN else ""
    )
    kept = f"; the file as it was is kept as {copy.name}" if copy is not None else ""
    return _loaded(
        path,
        LoadResult(settings, f"Some saved settings were not valid and use their defaults: {shown}{kept}."),
    )


def _aside(path: Path, suffix: str, why: str) -> LoadResult:
    try:
        aside = _set_aside(path, suffix)
    except OSError:
        return LoadResult(UserSettings(), f"{why}; using defaults.")
    return LoadResult(UserSettings(), f"{why}; moved to {aside.name}.", aside)


#: What this process last read from or wrote to each settings file: the base of the next save's merge.
_synced: dict[Path, UserSettings] = {}


def _loaded(path: Path, result: LoadResult) -> LoadResult:
    _synced[path] = result.settings
    return result


def _merge_items(
    base: tuple[Any, ...], ours: tuple[Any, ...], disk: tuple[Any, ...], ours_first: bool
) -> tuple[Any, ...]:
    """A list field merged three ways: what we removed since `base` goes, what we added comes, the rest as on disk."""
    removed = [x for x in base if x not in ours]
    added = [x for x in ours if x not in base]
    kept = [x for x in disk if x not in removed]
    if ours_first:
        return (*added, *(x for x in kept if x not in added))
    return (*kept, *(x for x in added if x not in kept))


def merge_settings(base: UserSettings, ours: UserSettings, disk: UserSettings) -> UserSettings:
    """`ours` applied on top of `disk` as the changes made since `base` (what this process last read or wrote), so
    that two windows saving one after the other keep each other's changes (folders, devices, per-model choices)."""
    choices = dict(disk.model_choices)
    for k, v in ours.model_choices.items():
        if base.model_choices.get(k) != v:
            choices[k] = v
    for k in base.model_choices:
        if k not in ours.model_choices:
            choices.pop(k, None)
    merged: dict[str, Any] = {}
    for name in UserSettings.__dataclass_fields__:
        b, o, d = getattr(base, name), getattr(ours, name), getattr(disk, name)
        merged[name] = o if o != b else d
    merged["model_choices"] = choices
    merged["folders"] = _merge_items(base.folders, ours.folders, disk.folders, ours_first=False)
    merged["hypothetical_devices"] = _merge_items(
        base.hypothetical_devices, ours.hypothetical_devices, disk.hypothetical_devices, ours_first=False
    )
    recent = _merge_items(base.recent_files, ours.recent_files, disk.recent_files, ours_first=True)
    merged["recent_files"] = recent[:MAX_RECENT]
    merged["schema_version"] = SCHEMA_VERSION
    return UserSettings(**merged)


@contextlib.contextmanager
def _locked(path: Path, timeout_s: float = 10.0) -> Iterator[None]:
    """An exclusive lock for one read-merge-write, between processes: on the settings folder itself (POSIX flock
    on the folder's descriptor), or on `<settings>.lock` on Windows."""
    if sys.platform == "win32":
        fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    else:
        fd = os.open(path.parent, os.O_RDONLY)
    deadline = time.monotonic() + timeout_s
    try:
        while not _try_lock(fd):
            if time.monotonic() > deadline:
                raise OSError(f"another fitplan keeps {path.name} locked")
            time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _try_lock(fd: int) -> bool:
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _read_disk(path: Path) -> tuple[UserSettings | None, dict[str, Any]]:
    """The settings on disk now (None when there are none or they are not a usable object) and the raw document's
    fields this version does not know (a newer fitplan's), which the save writes back. An OSError other than a
    missing file is raised: a save must not replace a file it could not read (EMFILE, EIO)."""
    try:
        data = read_regular_file(path, MAX_SETTINGS_BYTES)
    except (FileNotFoundError, NotRegularFileError, ValueError):
        return None, {}
    try:
        doc = _parse(data)
        settings, _problems = _from_json(doc)
    except (ValueError, SettingsFormatError):
        return None, {}
    return settings, _unknown_fields(doc)


def _unknown_fields(doc: object) -> dict[str, Any]:
    """Fields of a settings document this version does not read, at the top and in each model's choices."""
    if not isinstance(doc, dict):
        return {}
    known = set(UserSettings.__dataclass_fields__)
    extra: dict[str, Any] = {k: v for k, v in doc.items() if k not in known}
    choices = doc.get("model_choices")
    if isinstance(choices, dict):
        known_c = set(ModelChoices.__dataclass_fields__)
        per_model = {
            k: {n: x for n, x in v.items() if n not in known_c}
            for k, v in choices.items()
            if isinstance(v, dict) and any(n not in known_c for n in v)
        }
        if per_model:
            extra["model_choices"] = per_model
    return extra


def save_user_settings(settings: UserSettings, directory: Path | None = None) -> Path:
    """Merge with what is on disk (other windows' changes), under a lock, then write atomically: a temporary file
    next to the target, flushed, renamed over it. Raises `SettingsSaveError` (an OSError) with a message naming
    the folder when it cannot be written; nothing on disk is changed then."""
    path = settings_path(directory)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path):
            base = _synced.get(path)
            disk, extra = _read_disk(path)
            merged = (
                merge_settings(base, settings, disk) if base is not None and disk is not None else settings
            )
            _write_atomic(path, merged, extra)
    except OSError as exc:
        raise SettingsSaveError(
            f"cannot save settings in {path.parent}: {exc.strerror or exc}; the changes are kept only until fitplan"
            " closes"
        ) from exc
    _synced[path] = settings
    return path


def _write_atomic(path: Path, settings: UserSettings, extra: Mapping[str, Any] | None = None) -> None:
    """Write the settings, with `extra` (fields a newer version wrote) kept beside them. A settings file that is a
    link is written through: its target is replaced, the link stays."""
    doc = _to_json(replace(settings, schema_version=SCHEMA_VERSION))
    for k, v in (extra or {}).items():
        if k == "model_choices":
            for model, fields in v.items():
                if model in doc["model_choices"]:
                    doc["model_choices"][model] = {**fields, **doc["model_choices"][model]}
        else:
            doc.setdefault(k, v)
    payload = json.dumps(doc, indent=2, sort_keys=True)
    path = Path(os.path.realpath(path))
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
