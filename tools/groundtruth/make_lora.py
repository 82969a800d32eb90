"""Write a LoRA adapter GGUF for a base model, as llama.cpp's `--lora` reads it (src/llama-adapter.cpp).

For every 2-D weight of the base model whose name ends with one of `--targets` (default: the attention
projections `attn_q attn_k attn_v attn_output`), two tensors: `<name>.lora_a` of shape [n_in, rank] and
`<name>.lora_b` of shape [rank, n_out] (ggml order, ne0 first), F32 or F16, all zeros (a memory recording never
needs the values). The header says general.type = adapter, adapter.type = lora, adapter.lora.alpha.

Usage:
    python tools/groundtruth/make_lora.py BASE.gguf OUT.gguf [--rank 16] [--targets attn_q,attn_v] [--type f16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import gguf

DEFAULT_TARGETS = ("attn_q", "attn_k", "attn_v", "attn_output")


def lora_tensors(base: Path, targets: tuple[str, ...]) -> list[tuple[str, int, int]]:
    """(base tensor name, n_in = ne0, n_out = ne1) of every 2-D weight of `base` a target names."""
    reader = gguf.GGUFReader(str(base))
    out: list[tuple[str, int, int]] = []
    for t in reader.tensors:
        if not t.name.endswith(".weight") or len(t.shape) != 2:
            continue
        stem = t.name[: -len(".weight")].rsplit(".", 1)[-1]
        if stem in targets:
            out.append((t.name, int(t.shape[0]), int(t.shape[1])))
    return out


def architecture(base: Path) -> str:
    reader = gguf.GGUFReader(str(base))
    field = reader.fields["general.architecture"]
    return bytes(field.parts[field.data[0]]).decode()


def write_lora(base: Path, out: Path, rank: int, targets: tuple[str, ...], dtype: str, alpha: float) -> int:
    """Write the adapter; returns the number of adapted tensors."""
    pairs = lora_tensors(base, targets)
    if not pairs:
        raise SystemExit(f"{base}: no 2-D weight named by {', '.join(targets)}")
    np_type = np.float16 if dtype == "f16" else np.float32
    w = gguf.GGUFWriter(str(out), architecture(base))
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", alpha)
    for name, n_in, n_out in pairs:
        # numpy shapes are reversed ggml shapes: ne = [n_in, rank] is a (rank, n_in) array
        w.add_tensor(f"{name}.lora_a", np.zeros((rank, n_in), dtype=np_type))
        w.add_tensor(f"{name}.lora_b", np.zeros((n_out, rank), dtype=np_type))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return len(pairs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--targets", default=",".join(DEFAULT_TARGETS))
    ap.add_argument("--type", choices=("f32", "f16"), default="f32")
    ap.add_argument("--alpha", type=float, default=32.0)
    a = ap.parse_args(argv)
    n = write_lora(a.base, a.out, a.rank, tuple(a.targets.split(",")), a.type, a.alpha)
    print(f"{a.out}: {n} adapted tensors, rank {a.rank}, {a.type}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
