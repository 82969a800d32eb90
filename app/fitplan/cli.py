"""The `fitplan` command: no arguments opens the window; subcommands work headless.

Each subcommand lives in `fitplan.commands.<name>` and exposes `register(subparsers)`; the registered handler
returns the exit code: 0 ok, 1 does not fit (where that is the question), 2 bad input.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from fitplan import LLAMA_CPP_BUILD, LLAMA_CPP_COMMIT, __version__
from fitplan.core.errors import FitplanError

#: Subcommand modules, in the order `--help` lists them.
COMMANDS: tuple[str, ...] = ("inspect", "estimate", "plan", "command", "scan", "gpus", "verify")

EPILOG = """examples:
  fitplan                                   open the planner window
  fitplan inspect model.gguf                what the header says, layer by layer
  fitplan estimate model.gguf -c 32768 -np 1 -ctk q8_0 -ctv q8_0 --assume-gpu "RTX 4090=24GiB"
  fitplan plan model.gguf --assume-gpu 24GiB
  fitplan command model.gguf --shell powershell
  fitplan scan ~/models --json
  fitplan gpus
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fitplan",
        description="Will this GGUF model fit on my machine, with what context, and how do I launch it?",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"fitplan {__version__} (estimates llama.cpp commit {LLAMA_CPP_COMMIT}, build {LLAMA_CPP_BUILD})",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"fitplan.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"fitplan.commands.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list:
        from fitplan.gui.app import main as gui_main

        return gui_main([])
    parser = build_parser()
    args, extra = parser.parse_known_args(args_list)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    if extra and not getattr(args, "accepts_extra", False):
        parser.error("unrecognized arguments: " + " ".join(extra))
    try:
        return int(handler(args, extra))
    except FitplanError as exc:
        print(f"fitplan: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
