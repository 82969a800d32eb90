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
    Engine,
    LaunchSettings,
    MmprojPlacement,
    Tool,
)
from fitplan.core.base.results import Estimate
from fitplan.core.launch.flags import (
    DEFAULTS,
    FLAG_BY_KEY,
    FLAG_BY_NAME,
    OLLAMA_ENV,
    ParsedFlags,
    first_shard,
    parse_flags,
    preset_args,
    written_flags,
)
from fitplan.core.launch.shell import (
    Shell,
    check_printable,
    detect_shell,
    powershell_literal,
    quote,
    split_commands,
)
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
    "import_preset",
    "ollama_export",
    "plan_to_args",
    "preset_section_args",
    "read_preset_ini",
    "to_preset_ini",
]

#: Program names recognised as a llama.cpp launcher when importing (basename, without .exe).
_PROGRAMS: dict[str, Tool] = {
    "llama-server": Tool.SERVER,
    "server": Tool.SERVER,
    "llama-cli": Tool.CLI,
    "llama-fit-params": Tool.FIT_PARAMS,
}


def _settings_of(source: Plan | LaunchSettings) -> LaunchSettings:
    return source.settings if isinstance(source, Plan) else source


def plan_to_args(
    source: Plan | LaunchSettings,
    model_path: str | None,
    *,
    program: str = "llama-server",
    rpc_servers: Sequence[str] = (),
    kept: Sequence[str] = (),
) -> tuple[str, ...]:
    """The llama-server argv for a plan (or settings): program, `-m` first shard, then the flags that matter, then
    `kept`: the user's flags fitplan does not model (`ParsedFlags.passthrough`), as they were given."""
    argv: list[str] = [program] if program else []
    for it in written_flags(_settings_of(source), model_path, rpc_servers):
        argv.append(it.flag)
        if it.value is not None:
            argv.append(it.value)
    argv.extend(kept)
    return tuple(argv)


def _check_ini_value(key: str, value: str) -> None:
    check_printable(value.replace("\n", "").replace("\r", ""), f"preset key {key}")
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
    if not name or "]" in name or name != name.strip(" \t") or not name.isprintable():
        raise FlagError(
            f"preset name {name!r}: must be non-empty and printable (no line breaks), without ']' or outer blanks"
        )
    lines: list[str] = []
    if comment:
        lines.extend("; " + c for c in comment.splitlines())
    lines.append(f"[{name}]")
    merged: dict[str, str] = {}
    for it in written_flags(_settings_of(source), model_path, rpc_servers):
        if it.ini_key in merged:  # -ot entries: one comma-separated value
            merged[it.ini_key] += "," + it.ini_value
        else:
            merged[it.ini_key] = it.ini_value
    for k, v in merged.items():
        _check_ini_value(k, v)
        lines.append(f"{k} = {v}")
    return "\n".join(lines) + "\n"


#: common/preset.cpp's INI grammar: lines end at \r\n, \n or \r; blanks are spaces and tabs; a `;` or `#` starts a
#: comment anywhere (so a value ends before it); keys are identifiers; keys before any section are in [default].
_INI_LINE_END = re.compile(r"\r\n|\n|\r")
_INI_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
PRESET_DEFAULT_SECTION = "default"
PRESET_GLOBAL_SECTION = "*"


def _ini_line(raw: str) -> str:
    """A line without its comment and outer blanks."""
    cut = min((i for i in (raw.find(";"), raw.find("#")) if i >= 0), default=len(raw))
    return raw[:cut].strip(" \t")


def read_preset_ini(text: str) -> dict[str, tuple[str, ...]]:
    """The sections of a `--models-preset` INI text, each as the llama-server arguments its keys stand for (the way
    back of `to_preset_ini`; keys are read through the same flag table), read as common/preset.cpp reads them."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for n, raw in enumerate(_INI_LINE_END.split(text), 1):
        head, close, rest = raw.strip(" \t").partition("]")
        if head.startswith("[") and close and not _ini_line(rest):
            current = sections.setdefault(head[1:].strip(" \t"), [])
            continue
        line = _ini_line(raw)
        if not line:
            continue
        key, eq, value = line.partition("=")
        key = key.strip(" \t")
        if not eq or not _INI_KEY.fullmatch(key):
            raise FlagError(f"preset line {n}: expected [name] or key = value, got {raw[:60]!r}")
        if current is None:
            current = sections.setdefault(PRESET_DEFAULT_SECTION, [])
        current.append((key, value.strip(" \t")))
    return {name: preset_args(entries) for name, entries in sections.items()}


def preset_section_args(text: str, name: str | None = None) -> tuple[str, tuple[str, ...]]:
    """One section of a preset (`name`, else the only one) and its arguments, after those of the global section
    `[*]` that llama-server applies to every preset."""
    sections = read_preset_ini(text)
    common = sections.pop(PRESET_GLOBAL_SECTION, ())
    if name is None and len(sections) != 1:
        raise FlagError(f"the preset has {len(sections)} sections: name one ({', '.join(sections)[:200]})")
    key = name if name is not None else next(iter(sections))
    if key not in sections:
        raise FlagError(f"the preset has no section [{key}]")
    return key, (*common, *sections[key])


def import_preset(text: str, name: str | None = None, engine: Engine | None = None) -> ParsedFlags:
    """One section of a preset (the only one, or `name`) read back into settings, as `parse_flags` reads flags."""
    return parse_flags(preset_section_args(text, name)[1], engine=engine)


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
    ref = first_shard(model_path)
    check_printable(ref, "the Modelfile's FROM path")
    if ref != ref.strip() or ref.startswith('"'):
        raise FlagError(
            f"the Modelfile's FROM path {ascii(ref)[:80]} starts with a quote or a blank, or ends with one"
        )
    env = tuple(engines.ollama_environment(cfg).items())
    name = model_name or re.sub(
        r"[^a-z0-9_.-]+", "-", re.split(r"[\\/]", model_path)[-1].lower().removesuffix(".gguf")
    )
    return OllamaExport(env, engines.ollama_modelfile(ref, cfg), name or "model")


def env_lines(env: Sequence[tuple[str, str]], shell: Shell | str) -> str:
    """Environment assignments for the shell: `export A=1` (sh), `$env:A = '1'` (PowerShell), `set A=1` (cmd)."""
    sh = Shell(shell)
    lines: list[str] = []
    for name, value in env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise FlagError(f"{name!r} is not an environment variable name")
        check_printable(value, f"the value of {name}")
        if sh is Shell.SH:
            lines.append(f"export {name}={quote(value, sh)}")
        elif sh is Shell.POWERSHELL:
            lines.append(
                f"$env:{name} = {powershell_literal(value)}"
            )  # every PowerShell single quote doubled
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
    for it in written_flags(s, model_path, rpc_servers):
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


def _pinned(word: str) -> tuple[str, ...]:
    """The flag keys one argv word pins: a spelling of a `FLAGS` row (ollama's pin the settings they set), or an
    `OLLAMA_*=value` assignment."""
    name = word.split("=", 1)[0] if word.startswith(("--", "OLLAMA_")) else word
    row = FLAG_BY_NAME.get(name)
    if row is None and word.startswith("OLLAMA_"):
        key = OLLAMA_ENV.get(name)
        row = FLAG_BY_KEY.get(key) if key else None
    if row is None:
        return ()
    return row.pins or (row.key,)


def given_keys(args: Sequence[str]) -> frozenset[str]:
    """The flag keys (`fitplan.core.launch.flags.Flag.key`) an argv sets explicitly: what the user pinned."""
    return frozenset(k for a in args for k in _pinned(a))


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
