"""Typed result of reading a GGUF header (metadata and tensor infos, never tensor data).

The reader that fills these lives in `fitplan.core.gguf.reader`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Union

#: Arrays longer than this are not materialised by default (tokenizer tokens, scores, merges):
#: only their element type and length are kept.
DEFAULT_ARRAY_LIMIT = 4096

#: A metadata key fitplan's bundled examples carry: the file is a header on purpose (no tensor data), so it is complete
#: and its size is the declared one. docs/examples.md.
HEADER_ONLY_KEY = "fitplan.header_only"


#: The multimodal projector pseudo-architecture (llama.cpp tools/mtmd/clip.cpp loads general.architecture == "clip").
MMPROJ_ARCHITECTURE = "clip"


@dataclass(frozen=True, slots=True)
class GGUFArray:
    element_type: int  # gguf.GGUFValueType value of the elements
    length: int
    values: tuple[MetadataValue, ...] | None  # None when skipped (too long and not asked for)


MetadataValue = Union[int, float, bool, str, GGUFArray]  # noqa: UP007 (used at runtime in a recursive alias)


@dataclass(frozen=True, slots=True)
class GGUFTensorInfo:
    name: str
    ggml_type: int
    shape: tuple[int, ...]  # ne0 first, as stored
    offset: int  # relative to the start of the data section
    n_bytes: int  # ggml_nbytes for the type and shape


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    source: str  # path or URL
    version: int  # 2 or 3
    byte_order: str  # "<" little-endian, ">" big-endian
    metadata: Mapping[str, MetadataValue]  # read-only mapping, insertion order preserved
    tensors: tuple[GGUFTensorInfo, ...]
    alignment: int
    data_offset: int  # absolute offset where tensor data starts
    file_size: int | None  # None when unknown (remote source that did not say)
    header_bytes_read: int  # how many bytes of the file were read to parse the header

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else ""

    @property
    def is_mmproj(self) -> bool:
        """A multimodal projector file: the file format is told by its pseudo-architecture."""
        return self.architecture == MMPROJ_ARCHITECTURE

    @property
    def data_size(self) -> int:
        """Bytes of tensor data the header declares (end of the last tensor)."""
        return max((t.offset + t.n_bytes for t in self.tensors), default=0)

    @property
    def expected_file_size(self) -> int:
        return self.data_offset + self.data_size

    @property
    def header_only(self) -> bool:
        """A header written without its tensor data on purpose (HEADER_ONLY_KEY): complete, sized as declared."""
        return self.metadata.get(HEADER_ONLY_KEY) is True

    @property
    def declared_file_size(self) -> int:
        """The size of the file this header describes: the real size, or the declared one for header-only files."""
        if self.header_only or self.file_size is None:
            return self.expected_file_size
        return self.file_size

    def get_int(self, key: str, default: int = 0) -> int:
        """An integer key; `default` when absent, not a number, or not finite (NaN and infinity have no int)."""
        v = self.metadata.get(key)
        if isinstance(v, float):
            return int(v) if math.isfinite(v) else default
        return v if isinstance(v, int) and not isinstance(v, bool) else default

    def get_str(self, key: str, default: str = "") -> str:
        v = self.metadata.get(key)
        return v if isinstance(v, str) else default


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """A model as a set of files: its shards in order, and the multimodal projector paired with it (if any)."""

    shards: tuple[GGUFHeader, ...]
    mmproj: GGUFHeader | None = None

    @property
    def main(self) -> GGUFHeader:
        return self.shards[0]

    @property
    def file_size(self) -> int:
        return sum(h.declared_file_size for h in self.shards)
