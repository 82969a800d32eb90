"""Write the header-only GGUF files of the dense models in the published speed results (tests/fixtures/speed/).

The speed report needs each published model's layout (layers, widths, vocabulary) to place it as llama.cpp
would. The mixture-of-experts models come from tools/groundtruth/sparse_models.py (their configurations and
headers are already in tests/fixtures/llamacpp/models/sparse/); the dense ones here are written with the same
writer from their published config.json values, as a plain llama-architecture block (attention + gated FFN), which
is what a generated token reads. The report scales the bytes to the size the llama-bench table printed.

Usage:
    python tools/speed_models.py            # (re)write tests/fixtures/speed/models/*.header.gguf
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "speed" / "models"
sys.path.insert(0, str(ROOT / "tools" / "groundtruth"))

import sparse_models as sm  # noqa: E402

#: name: (source, hidden_size, layers, heads, kv heads, head_dim, intermediate_size, vocab, tied embeddings)
DENSE: dict[str, tuple[str, int, int, int, int, int, int, int, bool]] = {
    "llama-2-7b": ("meta-llama/Llama-2-7b-hf config.json", 4096, 32, 32, 32, 128, 11008, 32000, False),
    "llama-2-13b": ("meta-llama/Llama-2-13b-hf config.json", 5120, 40, 40, 40, 128, 13824, 32000, False),
    "tinyllama-1.1b": (
        "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T config.json",
        2048,
        22,
        32,
        4,
        64,
        5632,
        32000,
        False,
    ),
    "llama-3.2-3b": (
        "meta-llama/Llama-3.2-3B-Instruct config.json",
        3072,
        28,
        24,
        8,
        128,
        8192,
        128256,
        True,
    ),
    "qwen3-14b": ("Qwen/Qwen3-14B config.json", 5120, 40, 40, 8, 128, 17408, 151936, False),
    "gemma-3-12b": (
        "google/gemma-3-12b-it config.json (text_config)",
        3840,
        48,
        16,
        8,
        256,
        15360,
        262208,
        True,
    ),
    "phi-4": ("microsoft/phi-4 config.json", 5120, 40, 40, 10, 128, 17920, 100352, False),
    "mistral-small-24b": (
        "mistralai/Mistral-Small-24B-Instruct-2501 config.json",
        5120,
        40,
        32,
        8,
        128,
        32768,
        131072,
        False,
    ),
}
DENSE["qwen3-32b"] = ("Qwen/Qwen3-32B config.json", 5120, 64, 64, 8, 128, 25600, 151936, False)
DENSE["llama-3.3-70b"] = (
    "meta-llama/Llama-3.3-70B-Instruct config.json",
    8192,
    80,
    64,
    8,
    128,
    28672,
    128256,
    False,
)
DENSE["llama-3.2-1b"] = (
    "meta-llama/Llama-3.2-1B-Instruct config.json",
    2048,
    16,
    32,
    8,
    64,
    8192,
    128256,
    True,
)
DENSE["qwen2.5-7b"] = ("Qwen/Qwen2.5-7B-Instruct config.json", 3584, 28, 28, 4, 128, 18944, 152064, False)
DENSE["qwen2.5-14b"] = ("Qwen/Qwen2.5-14B-Instruct config.json", 5120, 48, 40, 8, 128, 13824, 152064, False)
DENSE["mistral-7b-v0.3"] = (
    "mistralai/Mistral-7B-Instruct-v0.3 config.json",
    4096,
    32,
    32,
    8,
    128,
    14336,
    32768,
    False,
)
DENSE["gemma-2-9b"] = ("google/gemma-2-9b-it config.json", 3584, 42, 16, 8, 256, 14336, 256000, True)
#: Models written with one quantization type for every matrix (llama-quantize's pure types), by name: the type.
PURE = {"qwen3-32b-q8_0": ("qwen3-32b", sm.Q.Q8_0)}


def build(name: str) -> sm.ModelSpec:
    if name in PURE:
        base, qtype = PURE[name]
        spec = build(base)
        spec.name = name
        spec.tensors = [
            (n, ne, q if q == sm.Q.F32 else sm.fit_type(qtype, ne[0])) for n, ne, q in spec.tensors
        ]
        return spec
    _src, n_embd, n_layer, n_head, n_kv, hd, n_ff, n_vocab, tied = DENSE[name]
    spec = sm.ModelSpec(name, "llama")
    spec.s("general.name", name)
    spec.u32("general.file_type", sm.FTYPE_Q4_K_M)
    spec.u32("general.quantization_version", 2)
    spec.a("vocab_size", n_vocab)
    spec.a("context_length", 4096)
    spec.a("embedding_length", n_embd)
    spec.a("block_count", n_layer)
    spec.a("feed_forward_length", n_ff)
    spec.a("attention.head_count", n_head)
    spec.a("attention.head_count_kv", n_kv)
    spec.a("attention.key_length", hd)
    spec.a("attention.value_length", hd)
    spec.a("rope.dimension_count", hd)
    spec.f32(f"{spec.arch}.rope.freq_base", 10000.0)
    spec.f32(f"{spec.arch}.attention.layer_norm_rms_epsilon", 1e-5)
    sm._embd_out(spec, n_embd, n_vocab, tied=tied)
    for il in range(n_layer):
        spec.t(f"blk.{il}.attn_norm.weight", (n_embd,))
        sm._attn_std(spec, il, n_embd, n_head, n_kv, hd)
        spec.t(f"blk.{il}.ffn_norm.weight", (n_embd,))
        sm._ffn_dense(spec, il, n_embd, n_ff)
    return spec


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in [*DENSE, *PURE]:
        sm.write_header(build(name), OUT / f"{name}.header.gguf")
        print(OUT / f"{name}.header.gguf")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
