"""Library scan benchmark: a generated library of GGUF files, scanned cold (empty caches) then warm (rescan).

The library (in a temporary folder, removed afterwards) has --files GGUF files (default 520) whose headers carry a
realistic tokenizer (--vocab tokens, about 0.3 MB of metadata per file), spread over a Hugging Face hub cache
(snapshot links to blobs, two revisions per repo), nested LM Studio style folders, a split set and projectors, plus
a folder symlink (an alias of part of the tree) and a link loop. "Cold" means empty fitplan caches (the files are in
the OS page cache, just written); "warm" is a new scanner in the same state a new process would have (index loaded
from disk). Goals on 2 cores: cold < 5 s, warm < 0.3 s.

    .venv/bin/python bench/scan.py [--files 520] [--vocab 16000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

from fitplan.core.library import JsonScanIndex, LibraryRoot, LibraryScanner, RootKind

GGUF_STRING, GGUF_ARRAY, GGUF_UINT32, GGUF_FLOAT32, GGUF_INT32 = 8, 9, 4, 6, 5
GGML_F32 = 0
ALIGN = 32


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def _kv_str(key: str, value: str) -> bytes:
    return _s(key) + struct.pack("<I", GGUF_STRING) + _s(value)


def _kv_u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<II", GGUF_UINT32, value)


def tokenizer_block(n_vocab: int) -> tuple[int, bytes]:
    """tokenizer.ggml.tokens / scores / token_type arrays: (number of KV pairs, bytes)."""
    tokens = b"".join(_s(f"tok{i:05d}") for i in range(n_vocab))
    out = _s("tokenizer.ggml.model") + struct.pack("<I", GGUF_STRING) + _s("llama")
    out += _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", GGUF_ARRAY, GGUF_STRING, n_vocab) + tokens
    out += (
        _s("tokenizer.ggml.scores")
        + struct.pack("<IIQ", GGUF_ARRAY, GGUF_FLOAT32, n_vocab)
        + bytes(4 * n_vocab)
    )
    out += (
        _s("tokenizer.ggml.token_type")
        + struct.pack("<IIQ", GGUF_ARRAY, GGUF_INT32, n_vocab)
        + bytes(4 * n_vocab)
    )
    return 4, out


def gguf_bytes(
    arch: str, name: str, tok: tuple[int, bytes], n_layer: int = 4, split: tuple[int, int] | None = None
) -> bytes:
    kvs = [
        _kv_str("general.architecture", arch),
        _kv_str("general.name", name),
        _kv_u32("general.file_type", 15),
        _kv_u32(f"{arch}.block_count", n_layer),
        _kv_u32(f"{arch}.context_length", 8192),
    ]
    if split is not None:
        kvs += [_kv_u32("split.no", split[0]), _kv_u32("split.count", split[1])]
    n_kv = len(kvs) + tok[0]
    tensors = b""
    n_el = 32
    for i in range(n_layer):
        tensors += _s(f"blk.{i}.attn_q.weight") + struct.pack("<IQIQ", 1, n_el, GGML_F32, i * n_el * 4)
    head = b"GGUF" + struct.pack("<IQQ", 3, n_layer, n_kv) + b"".join(kvs) + tok[1] + tensors
    pad = (-len(head)) % ALIGN
    return head + bytes(pad) + bytes(n_layer * n_el * 4)


def build(root: Path, n_files: int, n_vocab: int) -> int:
    tok = tokenizer_block(n_vocab)
    written = 0

    def put(path: Path, data: bytes) -> None:
        nonlocal written
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written += 1

    # hub cache: each repo has 2 quant blobs, linked from two snapshot revisions
    hub = root / "hub"
    n_repos = n_files // 4
    for r in range(n_repos):
        repo = hub / f"models--org{r % 7}--model-{r}-GGUF"
        for q in ("Q4_K_M", "Q8_0"):
            blob = repo / "blobs" / f"{r:08x}{q.lower()}"
            put(blob, gguf_bytes("llama", f"model {r} {q}", tok))
            for rev in ("rev-a", "rev-b"):
                link = repo / "snapshots" / rev / f"model-{r}-{q}.gguf"
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(os.path.relpath(blob, link.parent))
    # LM Studio style: publisher/repo/file, nested deeper for some
    lms = root / "lmstudio"
    i = 0
    while written < n_files - 5:
        depth = "/".join(f"d{k}" for k in range(i % 4))
        put(lms / f"pub{i % 11}" / f"repo{i}" / depth / f"file-{i}.gguf", gguf_bytes("qwen2", f"lm {i}", tok))
        if i % 25 == 0:
            put(
                lms / f"pub{i % 11}" / f"repo{i}" / depth / "mmproj-f16.gguf",
                gguf_bytes("clip", "proj", tok, 1),
            )
        i += 1
    # a split set of 4 shards
    for k in range(1, 5):
        put(root / "split" / f"big-{k:05d}-of-00004.gguf", gguf_bytes("llama", "big", tok, 4, (k - 1, 4)))
    # an alias of part of the tree and a loop: both must be ignored
    (root / "alias-of-lmstudio").symlink_to(lms)
    (root / "split" / "loop").symlink_to("..")
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=520)
    ap.add_argument("--vocab", type=int, default=16000)
    ap.add_argument("--keep", help="build the library here and keep it")
    args = ap.parse_args(argv)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fitplan-scan-bench-"))
    try:
        lib = work / "library"
        cache = work / "cache"
        os.environ["FITPLAN_CACHE_DIR"] = str(cache)  # the profile cache the default reader writes to
        t = time.perf_counter()
        n = build(lib, args.files, args.vocab)
        size = sum(p.stat().st_size for p in lib.rglob("*") if p.is_file() and not p.is_symlink())
        print(f"library: {n} GGUF files, {size / 1e6:.1f} MB, built in {time.perf_counter() - t:.1f} s")
        roots = [LibraryRoot(str(lib), RootKind.FOLDER)]
        index_path = cache / "scan-index.json"

        t = time.perf_counter()
        cold = LibraryScanner(index=JsonScanIndex(index_path)).scan(roots)
        t_cold = time.perf_counter() - t
        t = time.perf_counter()
        warm = LibraryScanner(index=JsonScanIndex(index_path)).scan(roots)
        t_warm = time.perf_counter() - t

        from fitplan.core.gguf.header_cache import cached_read_header

        t = time.perf_counter()
        LibraryScanner(reader=cached_read_header, index=JsonScanIndex(cache / "index-2.json")).scan(roots)
        t_cold_cache = time.perf_counter() - t

        print(
            f"cold scan: {t_cold:.3f} s  models {len(cold.models)}  skipped {len(cold.skipped)}  "
            f"headers read {cold.headers_read}  header bytes read {cold.header_bytes_read:,}"
        )
        print(
            f"warm scan: {t_warm:.3f} s  models {len(warm.models)}  skipped {len(warm.skipped)}  "
            f"headers read {warm.headers_read}  header bytes read {warm.header_bytes_read:,}"
        )
        print(
            f"cold scan also filling the profile cache (what `fitplan scan` does before its fit check): {t_cold_cache:.3f} s"
        )
        ok = warm.models == cold.models and warm.skipped == cold.skipped and warm.headers_read == 0
        print("warm scan returns the same models as the cold one:", "yes" if ok else "NO")
        print(
            f"goals: cold < 5 s {'met' if t_cold < 5 else 'MISSED'}, warm < 0.3 s {'met' if t_warm < 0.3 else 'MISSED'}"
        )
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
