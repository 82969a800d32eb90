"""The large models the window benches drag over, written as header-only GGUFs into a temporary folder.

Built with the project's own header writers (tools/groundtruth/sparse_models.py, tools/make_examples.py) from
published configurations, with the sizes changed where the bench needs a bigger model than the fixtures hold:

* "mla-moe-61": DeepSeek-V3's shape (61 layers, 7168 wide, 128 heads, MLA with kv_lora_rank 512 and a 64-wide rope
  part, 256 routed experts of 2048 with 8 used and 1 shared, the first 3 layers dense with FFN 18432, 129,280
  tokens, 160K context; deepseek-ai/DeepSeek-V3 config.json), written by the DeepSeek-V2-Lite example writer;
* "hybrid-1m": granite-4.0-h-tiny (Mamba-2 + 4 attention layers, 64 experts) with a 1,048,576-token context;
* "swa-200k-vocab": gpt-oss-20b (sliding-window attention on every other layer, 201,088 tokens).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tools" / "groundtruth"))

import make_examples  # noqa: E402
import sparse_models  # noqa: E402

DEEPSEEK_V3 = {
    "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "vocab_size": 129280, "max_position_embeddings": 163840,
    "routed_scaling_factor": 2.5,
}  # fmt: skip
NAMES = ("mla-moe-61", "hybrid-1m", "swa-200k-vocab")


def _patched(name: str, values: dict[str, object]) -> dict[str, object]:
    saved = dict(sparse_models.CONFIGS[name])
    sparse_models.CONFIGS[name].update(values)
    return saved


def write_models(out: Path) -> dict[str, Path]:
    """Each bench model as a header-only GGUF in `out`, by name."""
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, config, values, build in (
        ("mla-moe-61", "deepseek-v2-lite", DEEPSEEK_V3, make_examples.deepseek_v2_lite),
        (
            "hybrid-1m",
            "granite-4.0-h-tiny",
            {"max_position_embeddings": 1 << 20},
            sparse_models.BUILDERS["granite-4.0-h-tiny"],
        ),
        ("swa-200k-vocab", "gpt-oss-20b", {}, sparse_models.BUILDERS["gpt-oss-20b"]),
    ):
        saved = _patched(config, values)
        try:
            spec = build()
        finally:
            sparse_models.CONFIGS[config].clear()
            sparse_models.CONFIGS[config].update(saved)
        path = out / f"{name}.gguf"
        make_examples.write_header_only(spec, path)
        paths[name] = path
    return paths


if __name__ == "__main__":
    for n, p in write_models(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/fitplan-bench-models")).items():
        print(n, p, p.stat().st_size)
