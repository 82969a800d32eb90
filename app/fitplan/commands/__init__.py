"""Headless subcommands of the `fitplan` CLI. Each module exposes `register(subparsers)`.

A handler has the signature `handler(args: argparse.Namespace, extra: list[str]) -> int`; set it with
`parser.set_defaults(handler=..., accepts_extra=True|False)`. `accepts_extra=True` lets a subcommand take
llama-server's own flags after the model (they are passed in `extra`).
"""

#: The subcommands, in the order `fitplan --help` lists them, with the one-line summary each registers under: the
#: top-level help is built from this table alone, without importing any subcommand (`fitplan.cli`).
SUMMARIES: dict[str, str] = {
    "inspect": "what the header says: architecture, size, quant mix, layers, attention kinds",
    "estimate": "memory per device and term for a model with llama-server flags",
    "plan": "the largest context and fastest placement that fit, with the llama-server command",
    "command": "print only the llama-server command of the plan (or its preset INI section)",
    "quants": "which file of a Hugging Face repository (or a folder of quants) fits, before the download",
    "scan": "list the GGUF models in folders (default: the usual download places)",
    "gpus": "list the GPUs and host RAM found on this machine",
    "verify": "compare the estimate with llama.cpp's own dry run (llama-fit-params)",
    "launch": "start llama-server with the plan and compare what it allocated with the estimate",
}
