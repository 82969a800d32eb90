"""The llama-server command line for a plan (a pure function), its preset-file form, and importing a pasted command.

`plan_to_args` writes exactly the flags that change memory or placement, and leaves out those equal to
llama-server's defaults (build 515e85511) where the default is unambiguous:

* `-c` is always written when set (0 would mean the training context, and `--fit` may lower an unset one);
* `-ngl` is written unless it is "auto"; "all" is written as `-ngl all`;
* `-kvu` only with an explicit `-np` (with `-np` auto the server forces a unified cache anyway);
* `--fit off` whenever the settings say so: a plan fixes the context and the placement, and llama.cpp must not
  plan them again.

`to_preset_ini` writes the same settings as one section of a `llama-server --models-preset` INI file
(common/preset.cpp): keys are long flag names without dashes, values are written raw (no quoting), so a value
cannot contain `;` or `#` (comment starts), a line break, or leading/trailing blanks.

`import_command` reads a pasted command in any of the three shells back into settings with
`fitplan.core.launch.flags.parse_flags`, listing (not dropping) the flags fitplan does not model.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass

from fitplan.core import engines
from fitplan.core.base.devices import MIB, DeviceKind, Machine
from fitplan.core.base.errors import FlagError
from fitplan.core.base.launch_settings import (
    NGL_ALL,
    NGL_AUTO,
    Engine,
    FlashAttn,
    LaunchSettings,
    LoadMode,
    MmprojPlacement,
    Tool,
)
from fitplan.core.base.results import Estimate
from fitplan.core.gguf.hub import hf_arg
from fitplan.core.gguf.remote import is_url
from fitplan.core.launch.flags import ENGINE_FLAGS, MEMORY_FLAGS, OLLAMA_ENV, parse_flags
from fitplan.core.launch.shell import Shell, detect_shell, quote, split_commands
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.planner import EstimateFn, Plan

__all__ = [
    "DEFAULTS",
    "ArgNote",
    "ImportedCommand",
    "LaunchCommand",
    "OllamaExport",
    "annotate",
    "env_lines",
    "first_shard",
    "given_keys",
    "import_command",
    "ollama_export",
    "plan_to_args",
    "to_preset_ini",
]

#: llama-server's defaults, the reference for which flags are left out.
DEFAULTS = LaunchSettings()

#: Program names recognised as a llama.cpp launcher when importing (basename, without .exe).
_PROGRAMS: dict[str, Tool] = {
    "llama-server": Tool.SERVER,
    "server": Tool.SERVER,
    "llama-cli": Tool.CLI,
    "llama-fit-params": Tool.FIT_PARAMS,
}

_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def first_shard(path: str) -> str:
    """`model-00003-of-00005.gguf` -> `model-00001-of-00005.gguf`: llama.cpp is given the first shard of a split."""
    return _SHARD.sub(lambda m: f"-{1:05d}-of-{m.group(2)}.gguf", path)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _ngl(n: int) -> str:
    return "all" if n == NGL_ALL else ("auto" if n == NGL_AUTO else str(n))


@dataclass(frozen=True, slots=True)
class _Item:
    """One flag to write: CLI spelling, value (None for a switch), preset key and preset value."""

    key: str  # LaunchSettings field (or "model", "rpc", "draft.*") it comes from
    flag: str
    value: str | None
    ini_key: str
    ini_value: str


def _items(
    s: LaunchSettings,
    model_path: str | None,
    rpc_servers: Sequence[str],
) -> list[_Item]:
    out: list[_Item] = []

    def add(key: str, flag: str, value: str | None, ini_key: str, ini_value: str | None = None) -> None:
        out.append(
            _Item(key, flag, value, ini_key, ini_value if ini_value is not None else (value or "true"))
        )

    hf = hf_arg(model_path) if model_path else None  # `hf.co/ORG/REPO:QUANT`: llama-server downloads it itself
    if hf is not None:
        add("model", "-hf", hf, "hf-repo")
    elif model_path and is_url(model_path):
        add("model", "-mu", first_shard(model_path), "model-url")  # -m takes a local path; -mu downloads
    elif model_path:
        add("model", "-m", first_shard(model_path), "model")
    # with -hf, llama-server fetches the repository's projector itself
    if s.mmproj_path and s.mmproj is not MmprojPlacement.NONE and not (hf and is_url(s.mmproj_path)):
        if is_url(s.mmproj_path):
            add("mmproj_path", "-mmu", s.mmproj_path, "mmproj-url")
        else:
            add("mmproj_path", "--mmproj", s.mmproj_path, "mmproj")
    if rpc_servers:
        add("rpc", "--rpc", ",".join(rpc_servers), "rpc")
    if s.n_ctx > 0:
        add("n_ctx", "-c", str(s.n_ctx), "ctx-size")
    if s.n_parallel != DEFAULTS.n_parallel:
        add("n_parallel", "-np", str(s.n_parallel), "parallel")
    if s.kv_unified is True and s.n_parallel >= 0:
        add("kv_unified", "-kvu", None, "kv-unified", "true")
    if s.n_gpu_layers != NGL_AUTO:
        # ik_llama.cpp's -ngl takes a number only: 999 = every layer
        ngl = (
            str(IK_NGL_ALL)
            if s.engine is Engine.IK_LLAMA and s.n_gpu_layers == NGL_ALL
            else _ngl(s.n_gpu_layers)
        )
        add("n_gpu_layers", "-ngl", ngl, "n-gpu-layers")
    if s.split_mode is not DEFAULTS.split_mode:
        add("split_mode", "-sm", s.split_mode.value, "split-mode")
    if s.tensor_split:
        add("tensor_split", "-ts", ",".join(_num(x) for x in s.tensor_split), "tensor-split")
    if s.main_gpu != DEFAULTS.main_gpu:
        add("main_gpu", "-mg", str(s.main_gpu), "main-gpu")
    if s.devices is not None:
        dev = ",".join(s.devices) if s.devices else "none"
        add("devices", "-dev", dev, "device")
    if s.cpu_moe:
        add("cpu_moe", "--cpu-moe", None, "cpu-moe", "true")
    elif s.n_cpu_moe > 0:
        add("n_cpu_moe", "--n-cpu-moe", str(s.n_cpu_moe), "n-cpu-moe")
    for o in s.tensor_overrides:
        add("tensor_overrides", "-ot", f"{o.pattern}={o.buffer_type}", "override-tensor")
    if s.cache_type_k != DEFAULTS.cache_type_k:
        add("cache_type_k", "-ctk", s.cache_type_k, "cache-type-k")
    if s.cache_type_v != DEFAULTS.cache_type_v:
        add("cache_type_v", "-ctv", s.cache_type_v, "cache-type-v")
    if s.flash_attn is not FlashAttn.AUTO and not (
        s.engine is Engine.IK_LLAMA and s.flash_attn is FlashAttn.ON
    ):
        add("flash_attn", "-fa", s.flash_attn.value, "flash-attn")
    if s.n_batch != DEFAULTS.n_batch:
        add("n_batch", "-b", str(s.n_batch), "batch-size")
    if s.n_ubatch != DEFAULTS.n_ubatch:
        add("n_ubatch", "-ub", str(s.n_ubatch), "ubatch-size")
    if s.mmproj_path and s.mmproj is MmprojPlacement.CPU:
        add("mmproj", "--no-mmproj-offload", None, "mmproj-offload", "false")
    if s.no_kv_offload:
        add("no_kv_offload", "-nkvo", None, "kv-offload", "false")
    if s.swa_full:
        add("swa_full", "--swa-full", None, "swa-full", "true")
    if s.load_mode is not LoadMode.AUTO and s.engine is Engine.IK_LLAMA:
        # ik_llama.cpp has the older switches: --no-mmap, --mlock
        if s.load_mode in (LoadMode.NONE, LoadMode.DIO, LoadMode.MLOCK) and not s.run_time_repack:
            add("load_mode", "--no-mmap", None, "no-mmap", "true")
        if s.load_mode in (LoadMode.MLOCK, LoadMode.MMAP_MLOCK):
            add("load_mode", "--mlock", None, "mlock", "true")
    elif s.load_mode is not LoadMode.AUTO:
        add("load_mode", "-lm", s.load_mode.value, "load-mode")
    if not s.op_offload:
        add("op_offload", "--no-op-offload", None, "op-offload", "false")
    if not s.repack:
        add("repack", "-nr", None, "repack", "false")
    if s.no_host:
        add("no_host", "--no-host", None, "no-host", "true")
    if s.cache_ram_mib != DEFAULTS.cache_ram_mib:
        add("cache_ram_mib", "-cram", str(s.cache_ram_mib), "cache-ram")
    if s.ctx_checkpoints != DEFAULTS.ctx_checkpoints:
        add("ctx_checkpoints", "-ctxcp", str(s.ctx_checkpoints), "ctx-checkpoints")
    if s.embedding:
        add("embedding", "--embedding", None, "embedding", "true")
    if s.spec_types:
        add("spec_types", "--spec-type", ",".join(s.spec_types), "spec-type")
    d = s.draft
    if d is not None:
        add("draft.model_path", "-md", d.model_path, "model-draft")
        if d.n_gpu_layers != NGL_AUTO:
            add("draft.n_gpu_layers", "-ngld", _ngl(d.n_gpu_layers), "gpu-layers-draft")
        if d.cache_type_k != "f16":
            add("draft.cache_type_k", "-ctkd", d.cache_type_k, "cache-type-k-draft")
        if d.cache_type_v != "f16":
            add("draft.cache_type_v", "-ctvd", d.cache_type_v, "cache-type-v-draft")
        if d.n_max != 3:
            add("draft.n_max", "--spec-draft-n-max", str(d.n_max), "spec-draft-n-max")
    elif s.spec_draft_n_max != DEFAULTS.spec_draft_n_max:
        add("spec_draft_n_max", "--spec-draft-n-max", str(s.spec_draft_n_max), "spec-draft-n-max")
    out.extend(_engine_items(s))
    if s.engine is Engine.IK_LLAMA:
        pass  # ik_llama.cpp has no --fit: nothing re-plans the placement
    elif not s.fit:
        add("fit", "--fit", "off", "fit")
    elif s.fit_target_mib != DEFAULTS.fit_target_mib:
        add("fit_target_mib", "-fitt", ",".join(str(x) for x in s.fit_target_mib), "fit-target")
    return out


#: `-ngl` for every layer in ik_llama.cpp (its parser takes an integer; more than the model has = all).
IK_NGL_ALL = 999


def _engine_items(s: LaunchSettings) -> list[_Item]:
    """The flags only the selected engine has (ik_llama.cpp, beellama.cpp), in that engine's spelling."""
    out: list[_Item] = []
    if s.engine is Engine.IK_LLAMA:
        out.append(_Item("mla_mode", "-mla", str(s.mla_mode), "mla-use", str(s.mla_mode)))
        if s.attn_max_batch_mib > 0:
            v = str(s.attn_max_batch_mib)
            out.append(_Item("attn_max_batch_mib", "-amb", v, "attention-max-batch", v))
        if s.fused_moe:
            out.append(_Item("fused_moe", "-fmoe", None, "fused-moe", "true"))
        else:
            out.append(_Item("fused_moe", "-no-fmoe", None, "fused-moe", "false"))
        if s.run_time_repack:
            out.append(_Item("run_time_repack", "-rtr", None, "run-time-repack", "true"))
    elif s.engine is Engine.BEELLAMA:
        if s.cache_type_k_swa:
            out.append(
                _Item(
                    "cache_type_k_swa",
                    "--cache-type-k-swa",
                    s.cache_type_k_swa,
                    "cache-type-k-swa",
                    s.cache_type_k_swa,
                )
            )
            v = s.cache_type_v_swa or s.cache_type_k_swa
            out.append(_Item("cache_type_v_swa", "--cache-type-v-swa", v, "cache-type-v-swa", v))
        if s.kv_tail_tokens > 0 or s.kv_tail_tokens_swa >= 0:
            v = str(s.kv_tail_tokens)
            if s.kv_tail_tokens_swa >= 0:
                v = f"full={s.kv_tail_tokens},swa={s.kv_tail_tokens_swa}"
            out.append(_Item("kv_tail_tokens", "--kv-tail-tokens", v, "kv-tail-tokens", v))
        if s.kv_tail_type:
            out.append(
                _Item("kv_tail_type", "--kv-tail-type", s.kv_tail_type, "kv-tail-type", s.kv_tail_type)
            )
        if s.draft is None and "draft-mtp" in s.spec_types:
            if s.mtp_cache_type_k != "f16":
                v = s.mtp_cache_type_k
                out.append(_Item("mtp_cache_type_k", "--spec-draft-type-k", v, "spec-draft-type-k", v))
            if s.mtp_cache_type_v != "f16":
                v = s.mtp_cache_type_v
                out.append(_Item("mtp_cache_type_v", "--spec-draft-type-v", v, "spec-draft-type-v", v))
    return out


def _settings_of(source: Plan | LaunchSettings) -> LaunchSettings:
    return source.settings if isinstance(source, Plan) else source


def plan_to_args(
    source: Plan | LaunchSettings,
    model_path: str | None,
    *,
    program: str = "llama-server",
    rpc_servers: Sequence[str] = (),
) -> tuple[str, ...]:
    """The llama-server argv for a plan (or settings): program, `-m` first shard, then the flags that matter."""
    argv: list[str] = [program] if program else []
    for it in _items(_settings_of(source), model_path, rpc_servers):
        argv.append(it.flag)
        if it.value is not None:
            argv.append(it.value)
    return tuple(argv)


def _check_ini_value(key: str, value: str) -> None:
    if any(c in value for c in ";#\n\r"):
        raise FlagError(
            f"preset key {key}: the value {value!r} holds ';', '#' or a line break, which INI cannot keep"
        )
    if value != value.strip(" \t"):
        raise FlagError(
            f"preset key {key}: the value {value!r} starts or ends with a blank, which INI would drop"
        )


def to_preset_ini(
    source: Plan | LaunchSettings,
    name: str,
    model_path: str | None,
    *,
    rpc_servers: Sequence[str] = (),
    comment: str = "",
) -> str:
    """One `[name]` section of a llama-server models preset (INI) with the same settings as `plan_to_args`."""
    if not name or "]" in name or "\n" in name or name != name.strip():
        raise FlagError(
            f"preset name {name!r}: must be non-empty, without ']' or line breaks or outer blanks"
        )
    lines: list[str] = []
    if comment:
        lines.extend("; " + c for c in comment.splitlines())
    lines.append(f"[{name}]")
    merged: dict[str, str] = {}
    for it in _items(_settings_of(source), model_path, rpc_servers):
        if it.ini_key in merged:  # -ot entries: one comma-separated value
            merged[it.ini_key] += "," + it.ini_value
        else:
            merged[it.ini_key] = it.ini_value
    for k, v in merged.items():
        _check_ini_value(k, v)
        lines.append(f"{k} = {v}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------------
# ollama: environment variables and a Modelfile instead of a llama-server command
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OllamaExport:
    """What makes ollama run a plan: `ollama serve` with these variables, and a model created from the Modelfile."""

    environment: tuple[tuple[str, str], ...]
    modelfile: str
    model_name: str

    def create_argv(self, modelfile_path: str = "Modelfile") -> tuple[str, ...]:
        return ("ollama", "create", self.model_name, "-f", modelfile_path)


_ENV_VALUE = re.compile(r"[A-Za-z0-9_.:+-]*")


def ollama_export(source: Plan | LaunchSettings, model_path: str, model_name: str = "") -> OllamaExport:
    """The ollama environment (`OLLAMA_*`) and Modelfile (`PARAMETER num_ctx`, `num_gpu`) for the settings.

    `num_gpu` is the plan's resolved layer count when it has an estimate ("all" becomes the model's layers + 1)."""
    s = _settings_of(source)
    cfg = engines.ollama_config(s)
    if isinstance(source, Plan) and source.estimate is not None and s.n_gpu_layers == NGL_ALL:
        cfg = dataclasses.replace(cfg, num_gpu=source.estimate.context.n_gpu_layers)
    env = tuple(engines.ollama_environment(cfg).items())
    name = model_name or re.sub(
        r"[^a-z0-9_.-]+", "-", re.split(r"[\\/]", model_path)[-1].lower().removesuffix(".gguf")
    )
    return OllamaExport(env, engines.ollama_modelfile(first_shard(model_path), cfg), name or "model")


def env_lines(env: Sequence[tuple[str, str]], shell: Shell | str) -> str:
    """Environment assignments for the shell: `export A=1` (sh), `$env:A = '1'` (PowerShell), `set A=1` (cmd)."""
    sh = Shell(shell)
    lines: list[str] = []
    for name, value in env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise FlagError(f"{name!r} is not an environment variable name")
        if sh is Shell.SH:
            lines.append(f"export {name}={quote(value, sh)}")
        elif sh is Shell.POWERSHELL:
            lines.append(f"$env:{name} = '{value.replace(chr(39), chr(39) * 2)}'")
        else:
            if not _ENV_VALUE.fullmatch(value):
                raise FlagError(f"{name}={value!r}: cmd.exe's set cannot carry this value unquoted")
            lines.append(f"set {name}={value}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------------
# What each flag costs or saves
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArgNote:
    """The memory one written flag saves (negative deltas) or costs, against leaving it at llama-server's default."""

    flag: str
    value: str | None
    gpu_delta_bytes: int  # GPUs together: with the flag minus without it
    host_delta_bytes: int
    note: str


@dataclass(frozen=True, slots=True)
class LaunchCommand:
    argv: tuple[str, ...]
    notes: tuple[ArgNote, ...]


def _mib(n: int) -> str:
    return f"{abs(n) / MIB:,.0f} MiB"


def _delta(where: str, n: int) -> str:
    return f"saves {_mib(n)} {where}" if n < 0 else f"uses {_mib(n)} more {where}"


def _split_use(est: Estimate) -> tuple[int, int]:
    gpu = sum(d.used_bytes for d in est.devices if d.device.kind is not DeviceKind.CPU)
    host = sum(d.used_bytes for d in est.devices if d.device.kind is DeviceKind.CPU)
    return gpu, host


#: For each field a flag sets: the settings with that flag left at its default.
def _without(s: LaunchSettings, key: str) -> LaunchSettings | None:
    if key in ("model", "rpc", "mmproj_path") or key.startswith("draft."):
        return None
    if key == "n_ctx":
        return None  # the default (training context) is not a smaller or larger variant of a plan
    if key == "fit":
        return None
    if key == "mmproj":
        return dataclasses.replace(s, mmproj=MmprojPlacement.GPU)
    if key == "kv_unified":
        return dataclasses.replace(s, kv_unified=None)
    return dataclasses.replace(s, **{key: getattr(DEFAULTS, key)})


def annotate(
    source: Plan | LaunchSettings,
    model_path: str | None,
    profile: ModelProfile,
    machine: Machine,
    estimate_fn: EstimateFn,
    *,
    program: str = "llama-server",
    rpc_servers: Sequence[str] = (),
) -> LaunchCommand:
    """The argv with, for each flag that moves memory, how much it saves or costs on the GPUs and the host
    against the same launch with that one flag left at llama-server's default (flags that change nothing get no
    note)."""
    s = _settings_of(source)
    base = estimate_fn(profile, s, machine)
    base_gpu, base_host = _split_use(base)
    notes: list[ArgNote] = []
    seen: set[str] = set()
    for it in _items(s, model_path, rpc_servers):
        if it.key in seen:
            continue
        seen.add(it.key)
        alt = _without(s, it.key)
        if alt is None:
            if it.key == "n_ctx":
                kv = sum(
                    t.bytes for d in base.devices for t in d.terms if t.kind.value in ("kv", "recurrent")
                )
                notes.append(
                    ArgNote(it.flag, it.value, 0, 0, f"{s.n_ctx} tokens: KV cache and state take {_mib(kv)}")
                )
            elif it.key == "fit":
                notes.append(ArgNote(it.flag, it.value, 0, 0, "the plan fixes context and placement"))
            continue
        try:
            other = estimate_fn(profile, alt, machine)
        except FlagError:
            continue
        og, oh = _split_use(other)
        dg, dh = base_gpu - og, base_host - oh
        if dg == 0 and dh == 0:
            continue
        parts = []
        if dg:
            parts.append(_delta("on the GPUs", dg))
        if dh:
            parts.append(_delta("on the host", dh))
        notes.append(ArgNote(it.flag, it.value, dg, dh, ", ".join(parts) + " (vs llama-server's default)"))
    argv = plan_to_args(s, model_path, program=program, rpc_servers=rpc_servers)
    return LaunchCommand(argv, tuple(notes))


# ---------------------------------------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------------------------------------

_SPELLINGS: dict[str, str] = {name: spec.key for spec in MEMORY_FLAGS for name in spec.names}
#: ollama's settings pin the same llama-server settings.
_OLLAMA_PINS: dict[str, tuple[str, ...]] = {
    "ollama_num_ctx": ("n_ctx",),
    "ollama_num_parallel": ("n_parallel",),
    "ollama_kv_cache_type": ("cache_type_k", "cache_type_v"),
    "ollama_num_gpu": ("n_gpu_layers",),
}
_SPELLINGS_FORK: dict[str, tuple[str, ...]] = {
    **{name: _OLLAMA_PINS.get(spec.key, (spec.key,)) for _, spec in ENGINE_FLAGS for name in spec.names},
    **{env: _OLLAMA_PINS.get(key, (key,)) for env, key in OLLAMA_ENV.items()},
}


def given_keys(args: Sequence[str]) -> frozenset[str]:
    """The flag keys (as in `fitplan.core.launch.flags.MEMORY_FLAGS`) an argv sets explicitly: what the user pinned."""
    out: set[str] = set()
    for a in args:
        name = a.split("=", 1)[0] if a.startswith("--") else a
        key = _SPELLINGS.get(name)
        if key is not None:
            out.add(key)
        out.update(_SPELLINGS_FORK.get(name.split("=", 1)[0] if name.startswith("OLLAMA_") else name, ()))
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class ImportedCommand:
    shell: Shell
    program: str  # as written; "" when the paste held only flags
    args: tuple[str, ...]  # what followed the program
    settings: LaunchSettings
    model_path: str | None
    rpc_servers: tuple[str, ...]
    ignored: tuple[str, ...]  # flags that do not change memory, with their values
    unmodelled: tuple[str, ...]  # flags that change memory in ways fitplan does not model
    env: tuple[tuple[str, str], ...]  # environment variables set before the command
    given: frozenset[str]  # flag keys the command sets explicitly


_ENV_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)


def _program_tool(word: str) -> Tool | None:
    base = re.split(r"[\\/]", word)[-1]
    if base.lower().endswith(".exe"):
        base = base[:-4]
    return _PROGRAMS.get(base.lower())


def _env_of(cmd: tuple[str, ...]) -> list[tuple[str, str]]:
    """Environment assignments a command makes: `export A=1`, `set A=1`, `$env:A = 1`."""
    if not cmd:
        return []
    head = cmd[0]
    if head in ("export", "set") or head.lower() == "set":
        return [(m.group(1), m.group(2)) for w in cmd[1:] if (m := _ENV_ASSIGN.fullmatch(w))]
    if head.lower().startswith("$env:"):
        rest = head[5:]
        if "=" in rest:
            name, value = rest.split("=", 1)
            return [(name, value)]
        if len(cmd) >= 3 and cmd[1] == "=":
            return [(rest, cmd[2])]
        if len(cmd) == 2 and cmd[1].startswith("="):
            return [(rest, cmd[1][1:])]
    if all(_ENV_ASSIGN.fullmatch(w) for w in cmd):
        return [(m.group(1), m.group(2)) for w in cmd if (m := _ENV_ASSIGN.fullmatch(w))]
    return []


def import_command(
    text: str, shell: Shell | str | None = None, engine: Engine | None = None
) -> ImportedCommand:
    """A pasted llama-server command (sh, PowerShell or cmd.exe; detected when `shell` is None) as settings, for
    `engine` (or the `--engine` the paste carries; default mainline llama.cpp)."""
    sh = detect_shell(text) if shell is None else Shell(shell)
    commands = split_commands(text, sh)
    env: list[tuple[str, str]] = []
    chosen: tuple[str, ...] | None = None
    program = ""
    tool = Tool.SERVER
    for cmd in commands:
        # leading VAR=value words (sh) are the command's environment
        i = 0
        prefix: list[tuple[str, str]] = []
        while i < len(cmd) and (m := _ENV_ASSIGN.fullmatch(cmd[i])) and i + 1 < len(cmd):
            prefix.append((m.group(1), m.group(2)))
            i += 1
        found = next((j for j in range(i, len(cmd)) if _program_tool(cmd[j]) is not None), None)
        if found is not None:
            env.extend(prefix)
            program = cmd[found]
            tool = _program_tool(program) or Tool.SERVER
            chosen = cmd[found + 1 :]
            break
        if cmd and cmd[0].startswith("-"):
            chosen = cmd
            break
        env.extend(_env_of(cmd))
    if chosen is None:
        raise FlagError("no llama-server command found in the pasted text")
    parsed = parse_flags(chosen, LaunchSettings(tool=tool), engine=engine)
    return ImportedCommand(
        shell=sh,
        program=program,
        args=tuple(chosen),
        settings=parsed.settings,
        model_path=parsed.model_path,
        rpc_servers=parsed.rpc_servers,
        ignored=parsed.ignored,
        unmodelled=parsed.unmodelled,
        env=tuple(env),
        given=given_keys(chosen),
    )
