"""The reader against gguf-py's GGUFReader on real files: llama.cpp's vocabulary GGUFs and the per-architecture
models llama.cpp's test-llama-archs writes. Fetch them with `python tools/fetch_real_ggufs.py` (they go to
.cache/real-ggufs/, or set FITPLAN_REAL_GGUFS to their folder).

gguf-py builds a numpy object per token, so headers above SMALL_LIMIT bytes (the big vocabularies, ~1 s per MB) are
compared only with FITPLAN_REAL_GGUFS_FULL=1; the smaller ones and every architecture model always are.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fitplan.core.gguf.reader import diff_against_gguf_py, read_header
from support.models import REPO

FOLDER = Path(os.environ.get("FITPLAN_REAL_GGUFS", REPO / ".cache" / "real-ggufs"))
FULL = os.environ.get("FITPLAN_REAL_GGUFS_FULL") == "1"
SMALL_LIMIT = 1_500_000

FILES = sorted(FOLDER.rglob("*.gguf")) if FOLDER.is_dir() else []

if not FILES:
    pytest.skip(
        f"no real GGUF files in {FOLDER}: run `python tools/fetch_real_ggufs.py` (or set FITPLAN_REAL_GGUFS)",
        allow_module_level=True,
    )


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(FOLDER)) for p in FILES])
def test_matches_gguf_py(path: Path) -> None:
    h = read_header(path)
    if h.data_offset > SMALL_LIMIT and not FULL:
        pytest.skip(f"{h.data_offset} byte header: compared with gguf-py only with FITPLAN_REAL_GGUFS_FULL=1")
    assert diff_against_gguf_py(path, h) == []
    assert h.file_size == path.stat().st_size
    # the file ends with the last tensor's data, padded to the alignment as llama.cpp writes it
    assert h.file_size is not None and 0 <= h.file_size - h.expected_file_size < h.alignment


def test_vocab_headers_have_their_vocabulary() -> None:
    vocab = [p for p in FILES if p.name.startswith("ggml-vocab-")]
    if not vocab:
        pytest.skip("no ggml-vocab-*.gguf files")
    for p in vocab:
        h = read_header(p)
        tokens = h.metadata.get("tokenizer.ggml.tokens")
        assert tokens is not None and getattr(tokens, "length", 0) > 1000, p.name
        # vocab files hold no tensors: the header is the whole file
        assert h.tensors == () and h.data_offset == h.file_size
