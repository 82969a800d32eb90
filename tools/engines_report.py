"""Print every published fork number (the forks' own pages, cited per row) next to fitplan's estimate of it.

Where the published number is a total (a context's KV cache, KV + recurrent state, a draft context) it goes through
the public estimate path (`fitplan.core.launch.flags.parse_flags` + `fitplan.core.estimate.estimator.estimate`); where it is one
cache tensor family it goes through `fitplan.core.engines`. Models: DeepSeek-V2-Lite's header fixture, and shapes
written out below for DeepSeek-R1 and Qwen3.6-27B (no file of theirs is needed: only cache shapes matter).

    .venv/bin/python tools/engines_report.py            (a Markdown table)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from fitplan.core import engines
from fitplan.core.base.devices import GIB, MIB, Machine, assumed_gpu, host_device
from fitplan.core.base.results import Estimate, TermKind
from fitplan.core.estimate.estimator import estimate
from fitplan.core.gguf.reader import read_header
from fitplan.core.launch.flags import parse_flags
from fitplan.core.model.builder import build_profile
from fitplan.core.model.profile import LayerKind, LayerProfile, MlaParams, ModelProfile

ROOT = Path(__file__).resolve().parent.parent
DEEPSEEK_LITE = (
    ROOT / "tests" / "fixtures" / "llamacpp" / "models" / "sparse" / "deepseek-v2-lite.header.gguf"
)
MACHINE = Machine((assumed_gpu("GPU0", 80),), host_device(256 * GIB, 256 * GIB))


def deepseek_r1() -> ModelProfile:
    """DeepSeek-R1: 61 MLA layers, 128 heads, kv_lora_rank 512 + rope 64 (the cache shapes only)."""
    layers = tuple(
        LayerProfile(index=i, kind=LayerKind.MLA, n_head=128, n_head_kv=1, n_embd_head_k=576, n_embd_head_v=512,
                     n_ff=0, has_kv=True)
        for i in range(61)
    )  # fmt: skip
    return ModelProfile(
        path="deepseek-r1", shard_paths=(), architecture="deepseek2", name="DeepSeek-R1", file_type="", file_size=0,
        n_params=0, n_layer=61, n_layer_all=61, n_nextn=0, n_embd=7168, n_vocab=129280, n_ctx_train=163840,
        layers=layers, tensors=(),
        mla=MlaParams(kv_lora_rank=512, n_rot=64, key_length_mla=192, value_length_mla=128),
    )  # fmt: skip


def qwen36_27b(nextn: bool = False) -> ModelProfile:
    """Qwen3.6-27B: 64 layers, every 4th full attention (4 KV heads x 256), the others gated delta net with
    conv state 3 x (6144 + 2 x 16 x 128) and ssm state 128 x 6144 f32 per sequence; `nextn`: its MTP layer."""
    layers = []
    for i in range(64):
        full = (i + 1) % 4 == 0
        layers.append(
            LayerProfile(
                index=i, kind=LayerKind.FULL if full else LayerKind.RECURRENT, n_head=24,
                n_head_kv=4 if full else 0, n_embd_head_k=256, n_embd_head_v=256, n_ff=17408, has_kv=full,
                is_recurrent=not full, n_embd_r=0 if full else 3 * (6144 + 2 * 16 * 128),
                n_embd_s=0 if full else 128 * 6144,
            )
        )  # fmt: skip
    if nextn:
        layers.append(
            LayerProfile(index=64, kind=LayerKind.NEXTN, n_head=24, n_head_kv=4, n_embd_head_k=256,
                         n_embd_head_v=256, n_ff=17408, has_kv=True, is_nextn=True)
        )  # fmt: skip
    return ModelProfile(
        path="qwen3.6-27b", shard_paths=(), architecture="qwen35", name="Qwen3.6-27B", file_type="", file_size=0,
        n_params=0, n_layer=64, n_layer_all=len(layers), n_nextn=1 if nextn else 0, n_embd=5120, n_vocab=248320,
        n_ctx_train=262144, layers=tuple(layers), tensors=(),
    )  # fmt: skip


def run(profile: ModelProfile, *argv: str) -> Estimate:
    return estimate(profile, parse_flags(list(argv)).settings, MACHINE)


def total(est: Estimate, *kinds: TermKind) -> float:
    return sum(d.bytes_of(k) for d in est.devices for k in kinds) / MIB


def part(parts: tuple[engines.EngineCachePart, ...], prefix: str) -> float:
    return sum(p.bytes for p in parts if p.name.startswith(prefix)) / MIB


Row = tuple[str, str, str, Callable[[], float], str]


def rows() -> list[Row]:
    lite = build_profile(read_header(DEEPSEEK_LITE, allow_incomplete=True))
    r1 = deepseek_r1()
    q = qwen36_27b()
    ik = ("--engine", "ik_llama.cpp", "-np", "1")
    bee = ("--engine", "beellama", "-np", "1")
    kv = (TermKind.KV,)
    ctx = (TermKind.KV, TermKind.RECURRENT)
    return [
        ("ik disc. #354", "DeepSeek-Lite 32K, ik FlashMLA: KV (K only)", "972", lambda: total(
            run(lite, *ik, "-c", "32768"), *kv), "estimate"),
        ("ik disc. #354", "DeepSeek-Lite 32K, K576 + V512 f16 (ik -mla 1, no FA)", "1836", lambda: total(
            run(lite, *ik, "-c", "32768", "-mla", "1", "-fa", "off"), *kv), "estimate"),
        ("ik PR #240", "DeepSeek-Lite 65K -ctk q8_KV -mla 1 no FA: c^KV", "985.50", lambda: part(
            engines.ik_kv_cache(lite, 65536, mla_mode=1, flash_attn=False, type_k="q8_KV"), "K"), "engines"),
        ("ik PR #240", "same: kv^T f16", "1728", lambda: part(
            engines.ik_kv_cache(lite, 65536, mla_mode=1, flash_attn=False, type_k="q8_KV"), "V"), "engines"),
        ("ik PR #268", "DeepSeek-Lite 65K q8_0 K only", "1032", lambda: total(
            run(lite, *ik, "-c", "65536", "-ctk", "q8_0", "-ctv", "q8_0"), *kv), "estimate"),
        ("ik disc. #258", "DeepSeek-R1 32K -mla 2 -fa -ctk q8_0: KV", "1166.62", lambda: total(
            run(r1, *ik, "-c", "32768", "-mla", "2", "-ctk", "q8_0", "-ctv", "q8_0"), *kv), "estimate"),
        ("ik disc. #258", "DeepSeek-R1 65K, same: KV", "2333.25", lambda: total(
            run(r1, *ik, "-c", "65536", "-mla", "2", "-ctk", "q8_0", "-ctv", "q8_0"), *kv), "estimate"),
        ("ik disc. #477", "DeepSeek-R1 20,480 f16 -mla 3: KV (2 GPUs together)", "1372.50", lambda: total(
            run(r1, *ik, "-c", "20480"), *kv), "estimate"),
        ("beellama fit record", "Qwen3.6-27B 50,000 q4_0, tail 0: context (KV + state)", "1031", lambda: total(
            run(q, *bee, "-c", "50000", "-ctk", "q4_0", "-ctv", "q4_0"), *ctx), "estimate"),
        ("beellama fit record", "Qwen3.6-27B 50,000 kvarn4, tail 128: context", "1039", lambda: total(
            run(q, *bee, "-c", "50000", "-ctk", "kvarn4", "-ctv", "kvarn4", "--kv-tail-tokens", "128"), *ctx),
         "estimate"),
        ("beellama fit record", "Qwen3.6-27B 50,000 kvarn4, tail 1024: context", "1095", lambda: total(
            run(q, *bee, "-c", "50000", "-ctk", "kvarn4", "-ctv", "kvarn4", "--kv-tail-tokens", "1024"), *ctx),
         "estimate"),
        ("beellama fit record", "Qwen3.6-27B 100,000 kvarn4, tail 128: context", "1892", lambda: total(
            run(q, *bee, "-c", "100000", "-ctk", "kvarn4", "-ctv", "kvarn4", "--kv-tail-tokens", "128"), *ctx),
         "estimate"),
        ("beellama features doc", "Qwen3.6-27B kvarn4 records, 16K -> 64K, growth per side", "420", lambda: (
            part(engines.beellama_kv_cache(q, n_ctx_seq=65536, n_stream=1, n_seq_max=1, kv_unified=True,
                                           n_ubatch=512, type_k="kvarn4", type_v="kvarn4"), "KVarN records")
            - part(engines.beellama_kv_cache(q, n_ctx_seq=16384, n_stream=1, n_seq_max=1, kv_unified=True,
                                             n_ubatch=512, type_k="kvarn4", type_v="kvarn4"), "KVarN records")
        ) / 2, "engines"),
        ("beellama MTP", "Qwen3.6 NextN layer 212,992 x 4 slots unified, f16 draft cache", "832.00", lambda: total(
            run(qwen36_27b(True), *bee, "-c", "212992", "-np", "4", "-kvu", "--spec-type", "draft-mtp"),
            TermKind.DRAFT), "estimate"),
        ("beellama MTP", "same, kvarn2 draft cache", "~131", lambda: total(
            run(qwen36_27b(True), *bee, "-c", "212992", "-np", "4", "-kvu", "--spec-type", "draft-mtp",
                "-ctkd", "kvarn2", "-ctvd", "kvarn2"), TermKind.DRAFT), "estimate"),
        ("beellama window", "Qwen3.6-27B prefill window, 32K chunk (v0.4.5)", "128", lambda:
            engines.kvarn_materialization_window_bytes(q, 100352, 1, chunk=32768) / MIB, "engines"),
        ("beellama window", "Qwen3.6-27B prefill window, 64K chunk (transient term)", "256", lambda: sum(
            t.bytes for d in run(q, *bee, "-c", "100000", "-ctk", "kvarn4", "-ctv", "kvarn4").devices
            for t in d.transient) / MIB, "estimate"),
        ("beellama README (old layout)", "Qwen3.6-27B 64K bf16 KV", "4096", lambda: total(
            run(q, *bee, "-c", "65536", "-ctk", "bf16", "-ctv", "bf16"), *kv), "estimate"),
        ("beellama README (old layout)", "Qwen3.6-27B 64K q8_0 KV", "2176", lambda: total(
            run(q, *bee, "-c", "65536", "-ctk", "q8_0", "-ctv", "q8_0"), *kv), "estimate"),
        ("beellama README (old layout)", "Qwen3.6-27B 64K kvarn4 + tail 1024 (old arena: 24-32 MiB high)", "1232",
         lambda: total(run(q, *bee, "-c", "65536", "-ctk", "kvarn4", "-ctv", "kvarn4", "--kv-tail-tokens", "1024"),
                       *kv), "estimate"),
    ]  # fmt: skip


def main() -> int:
    print("| source | quantity (MiB) | published | fitplan | fitplan - published | path |")
    print("|---|---|---:|---:|---:|---|")
    for source, what, published, fn, path in rows():
        got = fn()
        pub = float(published.lstrip("~"))
        print(f"| {source} | {what} | {published} | {got:.2f} | {got - pub:+.2f} | {path} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
