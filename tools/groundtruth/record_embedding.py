"""Record what llama-server (commit 515e85511, build 11434) does with `--embedding` and `--reranking`, next to the same
launch without them: the context it derives (n_batch, n_ubatch, n_outputs_max) and the buffers it allocates.

`--reranking` is `--embedding` with rank pooling (common/arg.cpp); llama-server then sets n_batch = n_ubatch and
asks for n_batch outputs (tools/server). Writes tests/fixtures/llamacpp/embedding/<model>.json in the server grid's
case shape (`record.case_from_server`).

    python tools/groundtruth/record_embedding.py --build BUILD_DIR --work WORK    # WORK/archs/qwen3-dense.gguf
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record

#: the smoke models of test-llama-archs (record.py's archs grid writes them to WORK/archs)
MODELS = ("qwen3-dense",)
BASE = ["-c", "1024", "-np", "4", "-fit", "off", "-nr", "--no-warmup"]
CASES = (
    ("plain-c1024-np4", BASE),
    ("embedding-c1024-np4", [*BASE, "--embedding"]),
    ("reranking-c1024-np4", [*BASE, "--reranking"]),
)
OUT = record.FIXTURES / "embedding"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    args = ap.parse_args(argv)
    env = record.Env(args.build, args.work)
    OUT.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        model = args.work / "archs" / f"{name}.gguf"
        cases = [record.case_from_server(env, cid, model, a) for cid, a in CASES]
        doc = {
            "schema": record.SCHEMA_VERSION,
            "llama_cpp": record.LLAMA_CPP,
            "tool": "llama-server",
            "model": {
                "name": name,
                "path_hint": f"archs/{name}.gguf",
                "header": f"models/archs/{name}.header.gguf",
            },
            "cases": cases,
        }
        (OUT / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
        print(name, [(c["id"], c["results"]["resolved"]) for c in cases])
    return 0


if __name__ == "__main__":
    sys.exit(main())
