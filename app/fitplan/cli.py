"""The `fitplan` command: no arguments opens the window; subcommands work headless.

Each subcommand lives in `fitplan.commands.<name>` and exposes `register(subparsers)`; the registered handler
(`set_defaults(handler=...)`) returns the exit code: 0 ok, 1 does not fit (where that is the question), 2 bad input.
Shared output conventions (colour, tables, JSON, errors on stderr) are in `fitplan.commands._output`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from fitplan import LLAMA_CPP_BUILD, LLAMA_CPP_COMMIT, __version__
from fitplan.commands import _output as out
from fitplan.core.base.errors import FitplanError

#: Subcommand modules, in the order `--help` lists them.
COMMANDS: tuple[str, ...] = (
    "inspect",
    "estimate",
    "plan",
    "command",
    "quants",
    "scan",
    "gpus",
    "verify",
    "launch",
)

EPILOG = """examples:
  fitplan                                   open the planner window
  fitplan model.gguf                        open the planner window on a model
  fitplan inspect model.gguf                what the header says, layer by layer
  fitplan estimate model.gguf -c 32768 -np 1 -ctk q8_0 -ctv q8_0 --assume-gpu "RTX 4090=24GiB"
  fitplan plan model.gguf --assume-gpu 24GiB
  fitplan command model.gguf --shell powershell
  fitplan quants unsloth/Qwen3-8B-GGUF      which quant of a repository fits, before the download
  fitplan scan ~/models --json
  fitplan gpus
  fitplan verify model.gguf -c 16384 --llama-bin ~/llama.cpp/build/bin   compare with llama.cpp itself

every subcommand takes --json (one JSON document on stdout) and --help (its own examples).

exit status:
  0  success (and, for estimate/plan, the model fits)
  1  the model does not fit
  2  bad input: unreadable file, unknown flag, invalid setting

environment:
  NO_COLOR=1   never colour the output (colour is also off when stdout is not a terminal)
"""


def version_text() -> str:
    return f"fitplan {__version__} (estimates llama.cpp commit {LLAMA_CPP_COMMIT}, build {LLAMA_CPP_BUILD})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fitplan",
        description="Will this GGUF model fit on my machine, with what context, and how do I launch it?",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"fitplan.commands.{name}").register(sub)
    # Keep the line breaks of each subcommand's "examples:" epilog.
    for subparser in sub.choices.values():
        if subparser.epilog and subparser.formatter_class is argparse.HelpFormatter:
            subparser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def opens_window(args: Sequence[str]) -> bool:
    """`fitplan MODEL`: one argument that names a model (a .gguf path or URL, or an existing file) and is not a
    subcommand opens the window on it; anything else is for the subcommand parser (a typo stays an error)."""
    if len(args) != 1 or args[0].startswith("-") or args[0] in COMMANDS:
        return False
    word = args[0]
    return word.lower().endswith(".gguf") or word.startswith(("http://", "https://")) or os.path.isfile(word)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: `sys.argv[1:]`) and return the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or opens_window(args_list):
        from fitplan.gui.app import main as gui_main

        return int(gui_main(args_list, prog="fitplan"))
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(args_list)
        handler = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(sys.stderr)
            return out.EXIT_BAD_INPUT
        if extra and not getattr(args, "accepts_extra", False):
            parser.error("unrecognized arguments: " + " ".join(extra))
    except SystemExit as exc:  # argparse: --help / --version (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else out.EXIT_BAD_INPUT
    with out.safe_streams():  # names and paths from files never drive the terminal (docs/security.md)
        return _run_handler(handler, args, extra)


def _run_handler(handler: Any, args: argparse.Namespace, extra: list[str]) -> int:
    try:
        return int(handler(args, extra))
    except FitplanError as exc:
        return out.error(str(exc))
    except BrokenPipeError:  # `fitplan scan | head`: the reader left; say nothing more on stdout
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return out.EXIT_OK
    except OSError as exc:  # a path that does not exist, a folder we may not read...
        where = f"{exc.filename}: " if exc.filename else ""
        return out.error(f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        return 130
