"""Sparse model variants for the ik_llama.cpp recordings that tools/groundtruth/sparse_models.py does not write.

deepseek-v2-lite-legacy: DeepSeek-V2-Lite in the GGUF layout convert_hf_to_gguf.py wrote before mainline's MLA
rework (and the layout ik_llama.cpp recommends): head_count_kv 16, key_length 192 (qk_nope 128 + qk_rope 64),
value_length 128, no key_length_mla / value_length_mla, and one attn_kv_b matrix per layer
[kv_lora_rank, n_head * (qk_nope + v_head_dim)] instead of attn_k_b / attn_v_b. Everything else (hyperparameters,
quant mix, sparse data) is sparse_models.build_deepseek_v2_lite's.

Usage: python tools/groundtruth/ik/ik_models.py OUT_DIR [--header-only]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import sparse_models

LEGACY = "deepseek-v2-lite-legacy"

#: keys that only the modern (mainline MLA) layout carries, and the legacy values of the changed ones
_MODERN_ONLY_KEYS = ("deepseek2.attention.key_length_mla", "deepseek2.attention.value_length_mla")


def build_deepseek_v2_lite_legacy() -> sparse_models.ModelSpec:
    modern = sparse_models.build_deepseek_v2_lite()
    cfg = sparse_models.CONFIGS["deepseek-v2-lite"]
    n_head = sparse_models.cfg_int(cfg, "num_attention_heads")
    nope = sparse_models.cfg_int(cfg, "qk_nope_head_dim")
    rope = sparse_models.cfg_int(cfg, "qk_rope_head_dim")
    v_hd = sparse_models.cfg_int(cfg, "v_head_dim")
    kv_lora = sparse_models.cfg_int(cfg, "kv_lora_rank")
    legacy_values = {
        "deepseek2.attention.head_count_kv": n_head,  # num_key_value_heads = 16 in config.json
        "deepseek2.attention.key_length": nope + rope,
        "deepseek2.attention.value_length": v_hd,
    }
    spec = sparse_models.ModelSpec(LEGACY, modern.arch)
    for key, val, vtype, sub in modern.kv:
        if key in _MODERN_ONLY_KEYS:
            continue
        if key == "general.name":
            val = LEGACY
        spec.kv.append((key, legacy_values.get(key, val), vtype, sub))
    for name, ne, qtype in modern.tensors:
        if name.endswith(".attn_v_b.weight"):
            continue
        if name.endswith(".attn_k_b.weight"):
            il = name.split(".")[1]
            spec.t(f"blk.{il}.attn_kv_b.weight", (kv_lora, n_head * (nope + v_hd)), "attn_k")
            continue
        spec.tensors.append((name, ne, qtype))
    return spec


def generate(out_dir: Path, *, header_only: bool = False) -> Path:
    path = out_dir / (f"{LEGACY}.header.gguf" if header_only else f"{LEGACY}.gguf")
    sparse_models.write_gguf(build_deepseek_v2_lite_legacy(), path, header_only=header_only)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--header-only", action="store_true")
    args = ap.parse_args(argv)
    p = generate(args.out_dir, header_only=args.header_only)
    print(p, p.stat().st_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
