"""Builders of GGUF model folders for the library and scan tests (files written with gguf-py's GGUFWriter)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fitplan.core.gguf.header import GGUFHeader
from fitplan.core.gguf.reader import read_header
from gguf import GGUFWriter

#: llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M
FTYPE_Q4_K_M = 15


def write_model(
    path: Path,
    *,
    arch: str = "llama",
    name: str = "tiny",
    n_layer: int = 2,
    ctx: int = 4096,
    n_elements: int = 64,
    split: tuple[int, int] | None = None,
    file_type: int | None = FTYPE_Q4_K_M,
    truncate_by: int = 0,
    header_only: bool = False,
) -> Path:
    """A GGUF file with `n_layer` f32 tensors of `n_elements` each (split=(no, count) writes split.* keys;
    header_only sets `fitplan.header_only = true`, as the bundled examples do)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_block_count(n_layer)
    w.add_context_length(ctx)
    if file_type is not None:
        w.add_file_type(file_type)
    if split is not None:
        w.add_uint16("split.no", split[0])
        w.add_uint16("split.count", split[1])
    if header_only:
        w.add_bool("fitplan.header_only", True)
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.ones((n_elements,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if truncate_by:
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.truncate(size - truncate_by)
    return path


def write_mmproj(path: Path) -> Path:
    return write_model(path, arch="clip", name="projector", n_layer=1, file_type=1)


class CountingReader:
    """The real header reader, counting the files it is asked to read."""

    def __init__(self, reader: Callable[[str], GGUFHeader] = read_header) -> None:
        self.reader = reader
        self.paths: list[str] = []

    def __call__(self, path: str) -> GGUFHeader:
        self.paths.append(os.fspath(path))
        return self.reader(path)

    @property
    def calls(self) -> int:
        return len(self.paths)
