"""`fitplan command MODEL [llama-server flags...]`: only the planned llama-server command, quoted for a shell
(the platform's unless `--shell`), or with `--preset` the same plan as a `--models-preset` INI section.

The user's flags fitplan does not model (`--temp`, `--keep`, `--lora`, `--rope-scaling` ...) are kept at the end of
the command as they were given; stderr says which ones the estimate does not account for."""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from fitplan.commands import SUMMARIES
from fitplan.commands import _output as out
from fitplan.commands.estimate import add_flags_parser, engine_of
from fitplan.commands.plan import (
    add_common_arguments,
    build_request,
    command_argv,
    make_plan,
    ollama_json,
    ollama_of,
    ollama_text,
    preset_text,
)
from fitplan.core.base.devices import Machine
from fitplan.core.launch.flags import parse_flags
from fitplan.core.launch.shell import Shell, default_shell, join

EXAMPLES = """examples:
  fitplan command model.gguf                           the command for this machine, for this platform's shell
  fitplan command model.gguf --shell cmd -c 16384      for cmd.exe, with the context pinned
  fitplan command model.gguf --preset --name qwen3     a [qwen3] section for llama-server --models-preset
  fitplan command --engine ik_llama.cpp model.gguf     ik_llama.cpp's llama-server (-mla 3 -fmoe ...)
  fitplan command --engine ollama model.gguf           OLLAMA_* variables and a Modelfile
"""


def register(subparsers: Any) -> None:
    p = add_flags_parser(
        subparsers,
        "command",
        SUMMARIES["command"],
        "The llama-server command of `fitplan plan`, quoted for a shell. Any llama-server flags after "
        "MODEL are pins, so a printed command can be fed back.",
        EXAMPLES,
        usage="fitplan command MODEL [llama-server flags...] [options]",
    )
    add_common_arguments(p)
    p.add_argument(
        "--shell", choices=[s.value for s in Shell], help="shell to quote for (default: this platform's)"
    )
    p.add_argument(
        "--multiline", action="store_true", help="one flag per line, with the shell's continuations"
    )
    p.add_argument(
        "--preset", action="store_true", help="print a llama-server models preset (INI) section instead"
    )
    p.add_argument("--name", help="the preset section name (default: the model file name without .gguf)")
    p.add_argument(
        "--json", action="store_true", help="print the argv, the quoted command and the preset as JSON"
    )
    p.set_defaults(handler=run, accepts_extra=True)


def _default_name(model: str) -> str:
    base = os.path.basename(model)
    return base[:-5] if base.lower().endswith(".gguf") else base


def _kept_flags(args: argparse.Namespace, extra: list[str], with_preset: bool) -> tuple[str, ...]:
    """The words of the user's flags that fitplan does not model, with a note on stderr about each kind."""
    parsed = parse_flags(list(extra), engine=engine_of(args))
    where = "kept in the command (not in the preset)" if with_preset else "kept in the command"
    if parsed.unmodelled:
        out.warn(f"{where}; the estimate does not account for their memory: {', '.join(parsed.unmodelled)}")
    if parsed.ignored:
        out.warn(f"{where}; no effect on memory: {', '.join(parsed.ignored)}")
    return parsed.passthrough


def run(args: argparse.Namespace, extra: list[str], machine: Machine | None = None) -> int:
    req = build_request(args, extra, machine)
    p = make_plan(req)
    if not p.fits:
        out.warn(p.binding)
    exp = ollama_of(req, p)
    if exp is not None:
        if args.preset and not args.json:
            return out.error(
                "--preset is for llama-server; with --engine ollama the command prints a Modelfile"
            )
        kept: tuple[str, ...] = ()
    else:
        kept = _kept_flags(args, extra, args.preset or args.json)
    shell = Shell(args.shell) if args.shell else default_shell()
    # the kept flags are llama-server's: an ollama export has none
    argv = command_argv(req if kept else dataclasses.replace(req, passthrough=()), p, args.program)
    if args.json:
        doc: dict[str, object] = {
            "fits": p.fits,
            "binding": p.binding,
            "engine": p.settings.engine.value,
            "argv": list(argv),
            "shell": shell.value,
            "command": join(argv, shell, multiline=args.multiline, exact_text=False),
            "preset": preset_text(req, p, args.name or _default_name(args.model)),
            "kept_flags": list(kept),
            "unmodelled_flags": list(req.unmodelled),
        }
        if exp is not None:
            doc["ollama"] = ollama_json(exp, shell)
        out.print_json(doc)
    elif exp is not None:
        print(ollama_text(exp, shell))
    elif args.preset:
        print(preset_text(req, p, args.name or _default_name(args.model)), end="")
    else:
        print(join(argv, shell, multiline=args.multiline, exact_text=out.text_encoding()))
    return out.EXIT_OK if p.fits else out.EXIT_DOES_NOT_FIT
