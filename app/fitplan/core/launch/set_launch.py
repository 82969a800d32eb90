"""How a set plan (`plan.multi.MultiPlan`) is launched: one llama-server per model (each on its own port), the same
as a `--models-preset` INI for llama-server's router (the residents loaded at startup; `--models-max` as many as fit
together in any combination, since the router unloads the least recently used model rather than a chosen one), and
a llama-swap configuration (the residents in a persistent group that is never unloaded, the others in a swap group:
one of them at a time).

Every section and command carries the plan's settings through `command_line` (`plan_to_args`, `to_preset_ini`):
the same flags as a single model's plan.
"""

from __future__ import annotations

import json
import os

from fitplan.core.base.errors import FlagError
from fitplan.core.launch.command_line import plan_to_args, to_preset_ini
from fitplan.core.launch.flags import first_shard
from fitplan.core.plan.multi import ModelChoice, MultiPlan, Status

__all__ = ["DEFAULT_PORT", "llama_swap_yaml", "router_command", "router_preset", "set_commands"]

#: llama-server's default port; the models of a set listen on this one and the next ones
DEFAULT_PORT = 8080


def _path(m: ModelChoice) -> str:
    return os.path.abspath(first_shard(m.path)) if m.path else ""


def _argv(m: ModelChoice, program: str) -> tuple[str, ...]:
    return plan_to_args(
        m.settings, first_shard(m.path) if m.path else None, program=program, kept=m.passthrough
    )


def set_commands(
    p: MultiPlan, program: str = "llama-server", port: int = DEFAULT_PORT
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(model, argv) for every model that can be loaded, each on its own port: the residents started once, a
    swapped one started in place of the one before it."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for i, m in enumerate(x for x in p.models if x.loadable):
        out.append((m.name, (*_argv(m, program), "--port", str(port + i))))
    return tuple(out)


def router_preset(p: MultiPlan) -> str:
    """The `--models-preset` INI: a section per loadable model with its plan, `load-on-startup` for residents."""
    parts: list[str] = []
    for m in p.models:
        if not m.loadable:
            continue
        text = to_preset_ini(
            m.settings, m.name, _path(m) or None, comment=f"{m.status}: {m.placement.description}"
        )
        if m.status == Status.RESIDENT:
            text += "load-on-startup = true\n"
        parts.append(text)
    return "\n".join(parts)


def router_command(p: MultiPlan, preset_path: str, program: str = "llama-server") -> tuple[str, ...]:
    """The router's own command: the preset, and at most as many models loaded at once as fit together in any
    combination (`MultiPlan.router_models_max`: the router unloads the least recently used one)."""
    return (program, "--models-preset", preset_path, "--models-max", str(max(1, p.router_models_max)))


def _yaml_str(s: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is a subset of YAML's)."""
    return json.dumps(s, ensure_ascii=False)


def llama_swap_yaml(p: MultiPlan, program: str = "llama-server") -> str:
    """A llama-swap configuration: each model's command with llama-swap's `${PORT}`, the residents in a persistent
    group preloaded at startup, the swapped models in a swap group beside it."""
    lines = ["models:"]
    for m in p.models:
        if not m.loadable:
            continue
        argv = _argv(m, program)
        if any("\n" in a for a in argv):
            raise FlagError(
                f"{m.name}: a command word holds a line break, which llama-swap's cmd cannot keep"
            )
        cmd = " ".join(_yaml_quote_word(a) for a in argv)
        lines.append(f"  {_yaml_str(m.name)}:")
        lines.append(f"    cmd: {_yaml_str(cmd + ' --port ${PORT}')}")
    resident = [m.name for m in p.resident]
    swapped = [m.name for m in p.swapped]
    lines.append("groups:")
    if resident:
        lines.append('  "resident":')
        lines += ["    swap: false", "    exclusive: false", "    persistent: true", "    members:"]
        lines += [f"      - {_yaml_str(n)}" for n in resident]
    if swapped:
        lines.append('  "swapped":')
        lines += ["    swap: true", "    exclusive: false", "    members:"]
        lines += [f"      - {_yaml_str(n)}" for n in swapped]
    if resident:
        lines += ["hooks:", "  on_startup:", "    preload:"]
        lines += [f"      - {_yaml_str(n)}" for n in resident]
    return "\n".join(lines) + "\n"


def _yaml_quote_word(word: str) -> str:
    """A word of llama-swap's cmd (split like a POSIX shell): quoted when it holds a blank or a quote."""
    if word and not any(c in word for c in " \t'\"\\$"):
        return word
    return "'" + word.replace("'", "'\\''") + "'"
