"""`fitplan verify MODEL [llama-server flags...]`: the estimate next to llama.cpp's own dry run.

Runs `llama-fit-params` (found on PATH or in `--llama-bin DIR`) with the same memory flags, `-fitp on -v`, reads
its per-device memory (stdout: `DEVICE model context compute` in MiB; stderr: the memory breakdown table, with
extra rows such as CPU_REPACK, and the `compute buffer size` lines) and prints the estimate for the same program
(`--tool llama-fit-params`: its logits reservation is n_batch, its context is not unified) term by term with the
difference. Exit 0 when the comparison ran, 2 when it could not (no binary, bad input).

MODEL may be a URL, a Hub model (`hf.co/ORG/REPO:QUANT`), an interrupted download or a header-only file: then
llama-fit-params runs on a sparse copy (each shard's header, then a hole up to its declared size) written in a
temporary folder, which its dry run loads as the real file since it reads no tensor data.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fitplan.commands import _output as out
from fitplan.commands.estimate import add_flags_parser, machine_for, split_model_flag
from fitplan.core.base.errors import FitplanError, FlagError
from fitplan.core.base.numbers import NumberError, parse_real
from fitplan.core.inputs.model_source import load_model
from fitplan.core.launch.fit_params import BINARY, MAX_TIMEOUT_S, Comparison, Row, compare, find_binary
from fitplan.core.launch.flags import parse_flags

EXAMPLES = """examples:
  fitplan verify model.gguf -c 32768 -ngl 99
  fitplan verify model.gguf -c 8192 -ctk q8_0 -ctv q8_0 --llama-bin ~/llama.cpp/build/bin
  fitplan verify model.gguf -c 16384 -dev none --json
  fitplan verify https://huggingface.co/ORG/REPO/resolve/main/model-Q4_K_M.gguf -c 8192    no download
  fitplan verify model.gguf.part -c 8192           an interrupted download: its header is enough
"""


def register(subparsers: Any) -> None:
    summary = "compare the estimate with llama.cpp's own dry run (llama-fit-params)"
    p = add_flags_parser(subparsers, "verify", summary, __doc__, EXAMPLES)
    p.add_argument("model", nargs="?", help="a .gguf file (or give it with -m)")
    p.add_argument("--llama-bin", type=Path, help=f"folder holding {BINARY} (default: search PATH)")
    p.add_argument("--assume-gpu", action="append", default=[], metavar="NAME=SIZE", help=argparse.SUPPRESS)
    p.add_argument("--timeout", default="300", help="seconds to wait for llama.cpp (at most a week)")
    p.add_argument("--token", help="Hugging Face token for a URL or Hub model (default $HF_TOKEN)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=run, accepts_extra=True)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    args.model, extra = split_model_flag(args.model, extra)
    try:
        parsed = parse_flags(extra)
        timeout = parse_real(args.timeout, 1, MAX_TIMEOUT_S)
    except FlagError as exc:
        return out.error(str(exc))
    except NumberError as exc:
        return out.error(f"--timeout: {exc}")
    model = args.model or parsed.model_path
    if not model:
        return out.error("no model: give MODEL or -m MODEL")
    exe = find_binary(args.llama_bin)
    if exe is None:
        where = f"in {args.llama_bin}" if args.llama_bin else "on PATH"
        return out.error(
            f"{BINARY} not found {where}. It is built with llama.cpp (cmake --build build --target "
            f"{BINARY}); give its folder with --llama-bin DIR."
        )
    loaded = load_model(model, token=args.token, header_only=True)
    machine, notes = machine_for(parsed, list(args.assume_gpu))
    try:
        result = compare(exe, loaded.profile, loaded.files, extra, machine, token=args.token, timeout=timeout)
    except FitplanError as exc:
        return out.error(str(exc))
    notes = [*notes, *result.notes]
    if args.json:
        out.print_json(
            {
                "command": list(result.command),
                "rows": [
                    {
                        "device": r.device,
                        "term": r.term,
                        "estimate_mib": round(r.estimate_mib, 2),
                        "llamacpp_mib": r.llamacpp_mib,
                    }
                    for r in result.rows
                ],
                "llamacpp_compute_mib": result.compute,
                "notes": notes,
            }
        )
        return out.EXIT_OK
    print("$ " + " ".join(result.command))
    print(compare_table(result))
    for n in notes:
        print(out.style(f"note: {n}", out.DIM))
    print(
        out.style(
            "llama.cpp rounds down to whole MiB; the output buffer and the runtime reserve are not in its numbers "
            "and are left out here; CPU_REPACK is a row of its own.",
            out.DIM,
        )
    )
    return out.EXIT_OK


def compare_table(result: Comparison) -> str:
    """Estimate vs llama.cpp per device and term (MiB)."""
    lines = [
        out.table(
            ["device", "term", "estimate", "llama.cpp", "difference"],
            [_row(r) for r in result.rows],
            align="llrrr",
        )
    ]
    if result.compute:
        exact = ", ".join(f"{k} {v:.2f}" for k, v in result.compute.items())
        lines.append(f"llama.cpp compute buffers (MiB, from its log): {exact}")
    return "\n".join(lines)


def _row(r: Row) -> list[object]:
    if r.llamacpp_mib is None:
        return [r.device, r.term, f"{r.estimate_mib:.2f}", "-", ""]
    diff = r.estimate_mib - r.llamacpp_mib
    rel = f" ({diff / r.llamacpp_mib:+.1%})" if r.llamacpp_mib else ""
    return [r.device, r.term, f"{r.estimate_mib:.2f}", f"{r.llamacpp_mib:.0f}", f"{diff:+.2f}{rel}"]
