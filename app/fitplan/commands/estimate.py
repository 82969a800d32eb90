"""`fitplan estimate MODEL [llama-server flags...]`: the memory llama.cpp will allocate, per device and term.

Flags are llama-server's own spellings (see `fitplan.core.launch.flags`). Devices: `--assume-gpu NAME=SIZE` (repeatable),
else the GPUs this machine has; `-dev none` means no GPU. Exit code 0 when everything fits, 1 when it does not,
2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from fitplan.commands import SUMMARIES
from fitplan.commands import _output as out
from fitplan.commands._speed import add_speed_arguments, speed_json, speed_of, speed_text
from fitplan.core.base.devices import MIB, Device, DeviceKind, Machine, Vendor
from fitplan.core.base.errors import FlagError
from fitplan.core.base.launch_settings import Engine, LaunchSettings, Tool
from fitplan.core.base.numbers import INT32_MAX, int_reader
from fitplan.core.base.results import Estimate, TermKind
from fitplan.core.estimate.accuracy import AccuracyBand, accuracy_band
from fitplan.core.estimate.estimator import estimate
from fitplan.core.inputs.machine import MachineRequest, build_machine
from fitplan.core.inputs.model_source import launch_projector, load_loras, load_model
from fitplan.core.launch.flags import ParsedFlags, parse_flags, parse_mib
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.pool import memory_notes
from fitplan.core.plan.usage import DEFAULT_MARGIN_MIB, MarginPolicy, parse_gpu_margins, parse_reserve
from fitplan.core.plan.verdict import Verdict, judge

EXAMPLES = """examples:
  fitplan estimate model.gguf -c 32768 -np 1 --assume-gpu "RTX 4090=24GiB"
  fitplan estimate model.gguf -c 65536 -ctk q8_0 -ctv q8_0 -ngl 40 --assume-gpu 24GiB --json
  fitplan estimate model.gguf -dev none -c 8192          (no GPU: host RAM only)
  fitplan estimate model.gguf --n-cpu-moe 20 --assume-gpu 2x24GiB -ts 1,1
  fitplan estimate --engine ik_llama.cpp deepseek.gguf -mla 3 -amb 512 -c 32768
  fitplan estimate --engine beellama qwen.gguf -ctk kvarn4 -ctv kvarn4 --kv-tail-tokens 1024
  fitplan estimate --engine ollama model.gguf OLLAMA_KV_CACHE_TYPE=q8_0 --num-ctx 32768
"""

TERM_KEYS: tuple[TermKind, ...] = (
    TermKind.WEIGHTS,
    TermKind.KV,
    TermKind.RECURRENT,
    TermKind.COMPUTE,
    TermKind.OUTPUT,
    TermKind.MMPROJ,
    TermKind.DRAFT,
    TermKind.RESERVE,
)


def add_flags_parser(
    subparsers: Any, name: str, summary: str, description: str | None, epilog: str, usage: str | None = None
) -> argparse.ArgumentParser:
    """The parser of a subcommand that reads llama-server's own flags after MODEL: no abbreviated options (a
    prefix of one of ours must stay a llama-server flag), and the examples of `epilog` kept as written."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=summary,
        description=description,
        usage=usage,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    return parser


def register(subparsers: Any) -> None:
    summary = SUMMARIES["estimate"]
    p = add_flags_parser(subparsers, "estimate", summary, __doc__, EXAMPLES)
    p.add_argument("model", nargs="?", help="a .gguf file (or give it with -m)")
    p.add_argument(
        "--assume-gpu",
        action="append",
        default=[],
        metavar="NAME=SIZE",
        help="plan for this GPU instead of the detected ones (24GiB, 24G, 24, 24000MiB; NAME=SIZE or SIZE; "
        "repeatable, '2x24GiB' for two)",
    )
    p.add_argument(
        "--tool",
        choices=[t.value for t in Tool],
        default=Tool.SERVER.value,
        help="the llama.cpp program that will run the model (decides the logits reservation)",
    )
    p.add_argument("--reserve", metavar="MIB", help="runtime reserve per GPU in MiB (default: assumed)")
    add_margin_arguments(p)
    p.add_argument(
        "--host-ram", metavar="SIZE", help="estimate for this much host RAM instead of the detected amount"
    )
    add_engine_argument(p)
    add_speed_arguments(p)
    p.add_argument(
        "--header-only",
        action="store_true",
        help="accept a file shorter than its tensor data (a header fixture or a download in progress)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=run, accepts_extra=True)


def add_margin_arguments(p: argparse.ArgumentParser) -> None:
    """--margin and --host-margin: what `plan`, `estimate` and `scan` keep free (one spelling for all three)."""
    d = DEFAULT_MARGIN_MIB
    p.add_argument(
        "--margin",
        type=int_reader(0, INT32_MAX),
        default=d,
        metavar="MiB",
        help=f"memory left free per GPU (default {d})",
    )
    p.add_argument(
        "--host-margin",
        type=int_reader(0, INT32_MAX),
        default=d,
        metavar="MiB",
        help=f"host RAM left free (default {d})",
    )
    p.add_argument(
        "--use-total", action="store_true", help="measure against total memory instead of free memory"
    )
    p.add_argument(
        "--gpu-margin",
        metavar="MiB,MiB",
        help="memory left free on each GPU in order (e.g. 2048,256 for a display card and a compute card)",
    )
    p.add_argument(
        "--hold",
        action="append",
        default=[],
        metavar="DEVICE=SIZE[:NAME]",
        help="memory kept for another program on one device, by name (GPU0=2GiB:desktop, host=8GiB:browser)",
    )


def margin_policy(args: argparse.Namespace, machine: Machine) -> MarginPolicy:
    gpu_margin = getattr(args, "gpu_margin", None)
    return MarginPolicy(
        gpu_margin_bytes=args.margin * MIB,
        use_free=not args.use_total,
        host_margin_bytes=args.host_margin * MIB,
        check_host=machine.host.total_bytes > 0,
        per_gpu_bytes=parse_gpu_margins(gpu_margin) if gpu_margin else (),
        reserves=tuple(parse_reserve(r, len(machine.gpus)) for r in getattr(args, "hold", ())),
    )


def add_engine_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        choices=[e.value for e in Engine],
        default=None,
        help="the llama.cpp variant that runs the model (default llama.cpp); its own flags are accepted after MODEL "
        "(ik_llama.cpp: -mla -amb -fmoe -rtr; beellama: kvarnN cache types, --kv-tail-tokens; ollama: OLLAMA_*=V, "
        "--num-ctx, --num-parallel, --kv-cache-type, --flash-attention, --gpu-overhead, --num-gpu)",
    )


def engine_of(args: argparse.Namespace) -> Engine | None:
    value = getattr(args, "engine", None)
    return Engine(value) if value else None


def load_profile(path: str, header_only: bool = False) -> ModelProfile:
    """The model's profile through the one model loader (local file, split set, URL or Hub model). The estimate
    needs only the headers, so an interrupted download is estimated as well (`--header-only` is accepted for the
    same commands as `plan`'s)."""
    del header_only
    return load_model(path, header_only=True).profile


def machine_for(
    parsed: ParsedFlags, assume: list[str], host_ram: str | None = None
) -> tuple[Machine, list[str]]:
    """The devices to estimate for (`fitplan.core.inputs.machine`), and notes about how they were found."""
    rpc = tuple(
        Device(f"RPC{i}", DeviceKind.GPU, 0, 0, Vendor.RPC, host=h) for i, h in enumerate(parsed.rpc_servers)
    )
    notes = ["RPC servers' memory is unknown here: their rows show use only"] if rpc else []
    req = MachineRequest(tuple(assume), host_ram, rpc, no_gpu=parsed.settings.devices == ())
    machine, problems = build_machine(req)
    notes.extend(problems)
    return machine, notes


def split_model_flag(model: str | None, extra: list[str]) -> tuple[str | None, list[str]]:
    """Give `-m PATH` back its PATH: argparse takes the first bare word as MODEL even when it followed `-m`."""
    extra = list(extra)
    for flag in ("-m", "--model"):
        if model is not None and flag in extra:
            i = extra.index(flag)
            if i + 1 >= len(extra) or extra[i + 1].startswith("-"):
                extra.insert(i + 1, model)
                model = None
    return model, extra


def run(args: argparse.Namespace, extra: list[str]) -> int:
    args.model, extra = split_model_flag(args.model, extra)
    try:
        parsed = parse_flags(extra, engine=engine_of(args))
    except FlagError as exc:
        return out.error(str(exc))
    model = args.model or parsed.model_path
    if not model:
        return out.error("no model: give MODEL or -m MODEL")
    settings = dataclasses.replace(parsed.settings, tool=Tool(args.tool))
    ho = bool(getattr(args, "header_only", False))
    loaded = load_model(model, header_only=True)
    profile = loaded.profile
    mm_source, mmproj = launch_projector(loaded, settings)
    if mm_source is not None and mmproj is None:
        mmproj = load_profile(mm_source, ho)
    draft = load_profile(settings.draft.model_path, ho) if settings.draft is not None else None
    machine, notes = machine_for(parsed, list(args.assume_gpu), args.host_ram)
    reserve = None if args.reserve is None else int(parse_mib("--reserve", args.reserve) * MIB)
    loras = load_loras(settings)
    est = estimate(profile, settings, machine, mmproj=mmproj, draft=draft, reserve_bytes=reserve, loras=loras)
    v = judge(est, machine, margin_policy(args, machine))
    band = accuracy_band(profile, est)
    speed = speed_of(profile, machine, est.settings, args)
    if args.json:
        doc = to_json(model, profile, est, parsed, notes, fits_card=v.fits_card)
        doc["verdict"] = verdict_json(v)
        doc["accuracy"] = accuracy_json(band)
        doc["speed"] = speed_json(speed)
        out.print_json(doc)
    else:
        print_table(model, profile, est, parsed, notes, v)
        print(verdict_lines(v))
        print(speed_text(speed))
        print(band.text)
    # the exit status follows "fits the card" (estimate reports memory; `plan` applies the margins)
    return out.EXIT_OK if v.fits_card else out.EXIT_DOES_NOT_FIT


def verdict_json(v: Verdict) -> dict[str, object]:
    """The one verdict (`fitplan.core.plan.verdict`) as --json gives it."""
    return {
        "level": v.level.value,
        "fits": v.fits,
        "fits_card": v.fits_card,
        "margins": v.margin_text(),
        "gpu_margin_bytes": v.margin.gpu_margin_bytes,
        "host_margin_bytes": v.margin.host_margin_bytes,
        "n_parallel": v.n_seq,
        "kv_unified": v.kv_unified,
        "slots": v.slots_text(),
    }


def accuracy_json(band: AccuracyBand) -> dict[str, object]:
    """The measured error band (`fitplan.core.estimate.accuracy`) as --json gives it."""
    f = band.figures
    c = band.config
    return {
        "text": band.text,
        "engine": band.engine.value,
        "architecture": band.architecture,
        "configuration": {
            "key": c.key,
            "label": c.label,
            "flash_attn": c.flash_attn,
            "quantized_cache": c.quantized_cache,
            "split": c.split,
        },
        "scope": band.scope.value,
        "cases": f.cases if f is not None else 0,
        "compute_min_pct": f.compute_min_pct if f is not None else None,
        "compute_max_pct": f.compute_max_pct if f is not None else None,
        "weights_exact": f.weights_exact if f is not None else None,
        "kv_exact": f.kv_exact if f is not None else None,
        "measurement": band.measurement,
        "note": band.note,
    }


def verdict_lines(v: Verdict) -> str:
    card = out.style("yes", out.GREEN) if v.fits_card else out.style("no", out.RED, out.BOLD)
    with_margin = out.style("yes", out.GREEN) if v.fits else out.style("no", out.RED, out.BOLD)
    lines = [f"fits the card: {card}; fits with the margin ({v.margin_text()}): {with_margin}"]
    lines.extend(f"  {s.describe()}" for s in v.shortfalls)
    lines.extend(f"note: {n}" for n in memory_notes(v.card_usage))
    lines.append(f"slots: {v.slots_text()}")
    return "\n".join(lines)


def to_json(
    model: str,
    profile: ModelProfile,
    est: Estimate,
    parsed: ParsedFlags,
    notes: list[str],
    *,
    fits_card: bool,
) -> dict[str, object]:
    ctx = est.context
    s = est.settings
    return {
        "model": {
            "path": model,
            "architecture": profile.architecture,
            "name": profile.name,
            "file_type": profile.file_type,
            "file_size": profile.file_size,
            "n_params": profile.n_params,
            "n_layer": profile.n_layer,
            "n_ctx_train": profile.n_ctx_train,
            "verified_architecture": profile.verified_architecture,
        },
        "settings": {
            "n_ctx": ctx.n_ctx,
            "n_ctx_seq": ctx.n_ctx_seq,
            "n_parallel": ctx.n_seq_max,
            "kv_unified": ctx.kv_unified,
            "cache_type_k": s.cache_type_k,
            "cache_type_v": s.cache_type_v,
            "flash_attn": ctx.flash_attn,
            "n_batch": ctx.n_batch,
            "n_ubatch": ctx.n_ubatch,
            "n_gpu_layers": ctx.n_gpu_layers,
            "n_outputs_max": ctx.n_outputs_max,
            "tool": s.tool.value,
            "engine": s.engine.value,
            **engine_settings_json(s),
        },
        "devices": [
            {
                "name": d.device.name,
                "kind": d.device.kind.value,
                "total_bytes": d.device.total_bytes,
                "free_bytes": d.device.free_bytes,
                "terms": {k.value: d.bytes_of(k) for k in TERM_KEYS},
                "used_bytes": d.used_bytes,
                "breakdown": [
                    {
                        "kind": t.kind.value,
                        "label": t.label or t.kind.value,
                        "bytes": t.bytes,
                        "explanation": t.explanation,
                    }
                    for t in d.terms
                ],
                # scratch needed only while a prompt is processed: not in used_bytes
                "transient": [
                    {"label": t.label or t.kind.value, "bytes": t.bytes, "explanation": t.explanation}
                    for t in d.transient
                ],
            }
            for d in est.devices
        ],
        "fits": fits_card,  # the verdict's "fits the card" (no margin)
        # Host RAM llama-server fills while it runs, each bound under its own key (-1 = no limit).
        "host_runtime": {
            b.name.replace(" ", "_"): {"max_bytes": b.max_bytes, "explanation": b.explanation}
            for b in est.host_runtime
        },
        "weights_file_backed": est.weights_file_backed,
        "warnings": list(est.warnings),
        "assumptions": list(est.assumptions),
        "notes": notes,
        "ignored_flags": list(parsed.ignored),
        "unmodelled_flags": list(parsed.unmodelled),
    }


def engine_settings_json(s: LaunchSettings) -> dict[str, object]:
    """The settings only the selected engine has."""
    if s.engine is Engine.IK_LLAMA:
        return {
            "mla_mode": s.mla_mode,
            "attn_max_batch_mib": s.attn_max_batch_mib,
            "fused_moe": s.fused_moe,
            "run_time_repack": s.run_time_repack,
        }
    if s.engine is Engine.BEELLAMA:
        return {
            "kv_tail_tokens": s.kv_tail_tokens,
            "kv_tail_tokens_swa": s.kv_tail_tokens_swa,
            "kv_tail_type": s.kv_tail_type,
            "cache_type_k_swa": s.cache_type_k_swa,
            "cache_type_v_swa": s.cache_type_v_swa,
        }
    if s.engine is Engine.OLLAMA:
        return {"gpu_overhead_bytes": s.gpu_overhead_bytes}
    return {}


def _m(n: int) -> str:
    return f"{n / MIB:.2f}"


def _print_devices(est: Estimate, v: Verdict) -> None:
    """The table of devices and terms (MiB), each marked by the verdict's "fits the card", then what comes and goes
    while the server runs."""
    kinds = [k for k in TERM_KEYS if any(d.bytes_of(k) for d in est.devices)]
    headers = ["device", *[k.value for k in kinds], "used", "free", ""]
    rows: list[list[object]] = []
    for d, use in zip(est.devices, v.card_usage, strict=True):
        cap = d.device.free_bytes
        mark = out.style("fits", out.GREEN) if use.fits else out.style("DOES NOT FIT", out.RED, out.BOLD)
        if d.device.total_bytes == 0:
            mark = out.style("size unknown", out.YELLOW)
        rows.append([d.device.name, *[_m(d.bytes_of(k)) for k in kinds], _m(d.used_bytes), _m(cap), mark])
    print(out.table(headers, rows, align="l" + "r" * (len(kinds) + 2) + "l"))
    print("(MiB)")
    for d in est.devices:
        for t in d.transient:
            print(
                f"{d.device.name}, while a prompt is processed: {t.label} {_m(t.bytes)} MiB more ({t.explanation})"
            )
    for b in est.host_runtime:
        bound = "no limit" if b.max_bytes < 0 else f"up to {out.size(b.max_bytes)}"
        print(f"host, while running: {b.name} {bound} ({b.explanation})")
    if not est.weights_file_backed:
        why = (
            "-rtr" if est.settings.run_time_repack and est.settings.engine is Engine.IK_LLAMA else "-lm none"
        )
        print(f"host weights are anonymous memory ({why}): they cannot be paged out")


def print_table(
    model: str, profile: ModelProfile, est: Estimate, parsed: ParsedFlags, notes: list[str], v: Verdict
) -> None:
    ctx = est.context
    print(
        out.style(f"{os.path.basename(model)}", out.BOLD) + f"  {profile.architecture}, {profile.file_type}, "
        f"{out.size(profile.file_size)}"
    )
    print(
        f"context {ctx.n_ctx} ({ctx.n_seq_max} slot{'s' if ctx.n_seq_max != 1 else ''}, "
        f"{'unified' if ctx.kv_unified else f'{ctx.n_ctx_seq} per slot'}), "
        f"KV {est.settings.cache_type_k}/{est.settings.cache_type_v}, flash attention "
        f"{'on' if ctx.flash_attn else 'off'}, batch {ctx.n_batch}/{ctx.n_ubatch}, "
        f"{ctx.n_gpu_layers}/{profile.n_layer_all + 1} layers on GPU"
        + (f", engine {est.settings.engine.value}" if est.settings.engine is not Engine.LLAMA_CPP else "")
    )
    print()
    _print_devices(est, v)
    for w in est.warnings:
        out.warn(w)
    for a in est.assumptions:
        print(out.style(f"assumption: {a}", out.DIM))
    for n in notes:
        print(out.style(f"note: {n}", out.DIM))
    if parsed.ignored:
        print(out.style("ignored (no effect on memory): " + " ".join(parsed.ignored), out.DIM))
    if parsed.unmodelled:
        out.warn("not modelled (they do change memory): " + " ".join(parsed.unmodelled))
