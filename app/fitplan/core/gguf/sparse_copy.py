"""A sparse local copy of a model from its headers alone: each shard's header bytes, then a hole up to the size the
header declares. llama.cpp's dry run (`llama-fit-params`) reads no tensor data, so it loads such a copy as it would
the real file; a header-only file or an interrupted download instead ends in its "failed to load model".

The hole costs no disk on filesystems with sparse files (ext4, xfs, btrfs, APFS, NTFS extends lazily).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

from fitplan.core.base.errors import GGUFError
from fitplan.core.gguf.header import GGUFHeader, ModelFiles
from fitplan.core.gguf.remote import Deadline, HttpRangeSource, is_url

__all__ = ["header_prefix", "shard_file_name", "write_sparse_copy"]

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def shard_file_name(source: str) -> str:
    """The file name a shard keeps in the copy (llama.cpp finds the other shards of a split set by name)."""
    name = urllib.parse.unquote(urllib.parse.urlsplit(source).path) if is_url(source) else source
    base = _SAFE.sub("_", name.replace("\\", "/").rsplit("/", 1)[-1]) or "model.gguf"
    return base if base.lower().endswith(".gguf") else base + ".gguf"


def header_prefix(h: GGUFHeader, token: str | None = None, endpoint: str | None = None) -> bytes:
    """The bytes of a file before its tensor data (header and padding): one range request for a URL."""
    n = h.data_offset
    if is_url(h.source):
        src = HttpRangeSource(h.source, token, endpoint=endpoint, deadline=Deadline(120.0))
        data = src.read(0, n)
    else:
        with open(h.source, "rb") as f:
            data = f.read(n)
    if n - h.alignment < len(data) < n:
        data += bytes(
            n - len(data)
        )  # a header file cut after its tensor infos: the rest is alignment padding
    if len(data) != n:
        raise GGUFError(f"only {len(data)} of the header's {n} bytes could be read", None, h.source)
    return data


def write_sparse_copy(
    files: ModelFiles, folder: str | os.PathLike[str], token: str | None = None, endpoint: str | None = None
) -> Path:
    """Write every shard (header, then a hole up to its declared size) into `folder`; returns the first shard."""
    out = Path(folder)
    paths: list[Path] = []
    for h in files.shards:
        p = out / shard_file_name(h.source)
        if p in paths:
            raise GGUFError("two shards have the same file name", None, h.source)
        prefix = header_prefix(h, token, endpoint)
        with open(p, "wb") as f:
            f.write(prefix)
            f.truncate(max(h.expected_file_size, len(prefix)))
        paths.append(p)
    return paths[0]
