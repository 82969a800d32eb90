"""Headless subcommands of the `fitplan` CLI. Each module exposes `register(subparsers)`.

A handler has the signature `handler(args: argparse.Namespace, extra: list[str]) -> int`; set it with
`parser.set_defaults(handler=..., accepts_extra=True|False)`. `accepts_extra=True` lets a subcommand take
llama-server's own flags after the model (they are passed in `extra`).
"""
