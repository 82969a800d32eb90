"""`fitplan inspect MODEL|URL [--json]`: what a GGUF header says, layer by layer, as llama.cpp resolves it."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from typing import Any

from fitplan.commands import SUMMARIES
from fitplan.commands import _output as out
from fitplan.core.gguf.header import ModelFiles
from fitplan.core.inputs.model_source import load_model
from fitplan.core.model.builder import build_profile
from fitplan.core.model.profile import LayerProfile, ModelProfile

EXAMPLES = """examples:
  fitplan inspect model.gguf
  fitplan inspect model-00001-of-00003.gguf --json
  fitplan inspect https://huggingface.co/ORG/REPO/resolve/main/model.gguf
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "inspect",
        help=SUMMARIES["inspect"],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help="a .gguf file (any shard of a split model) or an http(s) URL")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--layers", action="store_true", help="list every layer (text output)")
    p.set_defaults(handler=run, accepts_extra=False)


def load_files(model: str) -> ModelFiles:
    """Read the headers of a local model (all shards), a remote one (HTTP range requests) or a Hub model."""
    return load_model(model, header_only=True).files


def incomplete_shards(files: ModelFiles) -> list[str]:
    """Shards shorter than the tensor data their header declares (interrupted downloads)."""
    return [
        f"{h.source}: {h.file_size} of {h.expected_file_size} bytes present (incomplete download)"
        for h in files.shards
        if h.file_size is not None and h.file_size < h.expected_file_size
    ]


def layer_to_dict(ly: LayerProfile) -> dict[str, object]:
    return {
        "index": ly.index,
        "kind": ly.kind.value,
        "n_head": ly.n_head,
        "n_head_kv": ly.n_head_kv,
        "n_embd_head_k": ly.n_embd_head_k,
        "n_embd_head_v": ly.n_embd_head_v,
        "n_ff": ly.n_ff,
        "is_swa": ly.is_swa,
        "has_kv": ly.has_kv,
        "kv_source": ly.kv_source,
        "is_recurrent": ly.is_recurrent,
        "is_moe": ly.is_moe,
        "n_expert_used": ly.n_expert_used,
    }


def profile_to_dict(p: ModelProfile) -> dict[str, object]:
    return {
        "path": p.path,
        "shards": list(p.shard_paths),
        "architecture": p.architecture,
        "verified_architecture": p.verified_architecture,
        "name": p.name,
        "is_mmproj": p.is_mmproj,
        "file_type": p.file_type,
        "file_size": p.file_size,
        "n_params": p.n_params,
        "n_tensors": len(p.tensors),
        "n_layer": p.n_layer,
        "n_layer_all": p.n_layer_all,
        "n_nextn": p.n_nextn,
        "n_embd": p.n_embd,
        "n_vocab": p.n_vocab,
        "n_ctx_train": p.n_ctx_train,
        "swa_type": p.swa_type.value,
        "n_swa": p.n_swa,
        "has_memory": p.has_memory,
        "tied_embeddings": p.tied_embeddings,
        "mla": out.to_jsonable(p.mla),
        "moe": out.to_jsonable(p.moe),
        "ssm": out.to_jsonable(p.ssm),
        "rope": out.to_jsonable(p.rope),
        "quant_mix": [{"type": t, "bytes": b} for t, b in p.quant_mix],
        "weight_bytes": p.weight_bytes,
        "layers": [layer_to_dict(ly) for ly in p.layers],
        "warnings": list(p.warnings),
    }


def _params(n: int) -> str:
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def _kind_summary(p: ModelProfile) -> str:
    counts = Counter(ly.kind.value for ly in p.layers)
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def layer_runs(p: ModelProfile, limit: int = 12) -> str:
    """The attention kind of each layer as runs: "0-4 swa, 5 full, 6-10 swa, ..."."""
    runs: list[tuple[int, int, str]] = []
    for ly in p.layers:
        if runs and runs[-1][2] == ly.kind.value and runs[-1][1] == ly.index - 1:
            runs[-1] = (runs[-1][0], ly.index, ly.kind.value)
        else:
            runs.append((ly.index, ly.index, ly.kind.value))
    parts = [f"{a} {k}" if a == b else f"{a}-{b} {k}" for a, b, k in runs[:limit]]
    if len(runs) > limit:
        parts.append(f"... ({len(runs) - limit} more runs, see --layers)")
    return ", ".join(parts)


def format_text(p: ModelProfile, all_layers: bool = False) -> str:
    lines: list[str] = []
    arch = p.architecture + ("" if p.verified_architecture else " (not known to llama.cpp)")
    lines.append(f"{out.style(out.clean(p.name or os.path.basename(p.path)), out.BOLD)}")
    rows: list[list[object]] = [
        ["architecture", arch],
        ["file", f"{out.size(p.file_size)} in {len(p.shard_paths)} file(s), {len(p.tensors)} tensors"],
        ["file type", p.file_type],
        ["parameters", _params(p.n_params)],
    ]
    if p.is_mmproj:
        rows.append(["kind", "multimodal projector (mmproj)"])
    else:
        rows.append(["train context", str(p.n_ctx_train)])
        layer_line = f"{p.n_layer}" + (f" + {p.n_nextn} NextN/MTP" if p.n_nextn else "")
        rows.append(["layers", f"{layer_line}: {_kind_summary(p)}"])
        if len({ly.kind for ly in p.layers}) > 1:
            rows.append(["layer kinds", layer_runs(p)])
        rows.append(
            ["embedding", f"{p.n_embd}, vocab {p.n_vocab}" + (", tied output" if p.tied_embeddings else "")]
        )
        if p.swa_type.value != "none":
            rows.append(["sliding window", f"{p.n_swa} ({p.swa_type.value})"])
        if p.mla is not None:
            rows.append(["MLA", f"kv_lora_rank {p.mla.kv_lora_rank}, rope {p.mla.n_rot}"])
        if p.moe is not None and p.moe.n_expert > 0:
            shared = f", {p.moe.n_expert_shared} shared" if p.moe.n_expert_shared else ""
            rows.append(["experts", f"{p.moe.n_expert_used} of {p.moe.n_expert} per token{shared}"])
        if not p.has_memory:
            rows.append(["memory", "no KV cache (llama.cpp creates no memory module)"])
    mix = ", ".join(f"{t} {out.size(b)}" for t, b in p.quant_mix[:6])
    rows.append(["quant mix", mix])
    lines.append(out.table([], rows, align="ll"))
    if p.layers and all_layers:
        lines.append("")
        lines.append(
            out.table(
                ["layer", "kind", "heads", "kv heads", "head k/v", "ffn", "moe"],
                [
                    [
                        ly.index,
                        ly.kind.value,
                        ly.n_head,
                        ly.n_head_kv,
                        f"{ly.n_embd_head_k}/{ly.n_embd_head_v}",
                        ly.n_ff,
                        "yes" if ly.is_moe else "",
                    ]
                    for ly in p.layers
                ],
                align="rlrrrrl",
            )
        )
    for w in p.warnings:
        lines.append(f"warning: {out.clean(w)}")
    return "\n".join(lines)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    files = load_files(args.model)
    profile = build_profile(files)
    incomplete = incomplete_shards(files)
    if args.json:
        doc = profile_to_dict(profile)
        doc["incomplete"] = incomplete
        out.print_json(doc)
    else:
        print(format_text(profile, all_layers=args.layers))
    sys.stdout.flush()
    for problem in incomplete:
        out.warn(problem)
    return out.EXIT_OK
