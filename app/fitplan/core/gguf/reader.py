"""Fast, defensive reader of GGUF headers (metadata and tensor infos; tensor data is never read).

One parser (`parse_header`) works over any `ByteSource`: a local file (`FileSource`) or HTTP Range requests
(`fitplan.core.gguf.remote`). It reads a prefix of the file that grows (doubling) only as far as the header needs.

Rules follow llama.cpp's ggml/src/gguf.cpp (b11434): GGUF v2 and v3, either byte order (detected from the version
field), u64 counts and lengths, `general.alignment` a u32 power of two, tensor data packed in declaration order at
aligned offsets. Every count and length is checked against the bytes left in the file before anything is allocated,
nesting of arrays is bounded, and every failure is a `GGUFError` naming the offset.
"""

from __future__ import annotations

import bisect
import os
import re
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from fitplan.core.base.errors import FileAccessError, GGUFError, IncompleteModelError, MissingShardError
from fitplan.core.base.files import NotRegularFileError, open_regular_file
from fitplan.core.base.numbers import int_or_none
from fitplan.core.gguf import ggml_types
from fitplan.core.gguf.header import (
    DEFAULT_ARRAY_LIMIT,
    GGUFArray,
    GGUFHeader,
    GGUFTensorInfo,
    MetadataValue,
    ModelFiles,
)

if TYPE_CHECKING:
    import numpy as np
else:
    from fitplan.core.base.lazy import np

__all__ = [
    "DEFAULT_ARRAY_LIMIT",
    "MAX_ARRAY_DEPTH",
    "ByteSource",
    "FileSource",
    "check_split_set",
    "diff_against_gguf_py",
    "find_mmproj_for",
    "is_mmproj",
    "mmproj_candidates",
    "open_model",
    "parse_header",
    "rank_mmproj",
    "read_header",
    "split_count",
    "split_shard_paths",
]

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32
#: Arrays nested deeper than this are refused (llama.cpp reads no nested arrays at all; gguf-py writes them).
MAX_ARRAY_DEPTH = 8
#: llama.cpp's GGUF_MAX_STRING_LENGTH and GGUF_MAX_ARRAY_ELEMENTS.
MAX_STRING_LENGTH = 1024 * 1024 * 1024
MAX_ARRAY_ELEMENTS = 1024 * 1024 * 1024
#: ggml's GGML_MAX_DIMS.
MAX_DIMS = 4
#: ggml.h GGML_MAX_NAME: a tensor name is shorter (gguf.cpp refuses longer ones), so no name is long enough to make
#: an `-ot` pattern backtrack for long.
GGML_MAX_NAME = 64
#: The most tensors one file may list (the largest models list a few thousand; per-expert layouts tens of
#: thousands): 3 million tiny tensor infos would fit under the header size cap and cost gigabytes.
MAX_TENSORS = 1 << 17
#: Upper bound on a header (metadata + tensor infos). Real ones stay under ~20 MB (a 262k-token vocabulary is 16 MB);
#: the cap keeps a hostile count in a large file from reading gigabytes of tensor data as "strings".
MAX_HEADER_BYTES = 256 * 1024 * 1024

FIRST_CHUNK_LOCAL = 1024 * 1024
#: Skipped string arrays at least this long are walked in bulk with numpy (see `_Parser._walk_strings_bulk`).
BULK_WALK_MIN_STRINGS = 4096
BULK_WALK_MIN_WINDOW = 8 * 1024
BULK_WALK_MAX_WINDOW = 256 * 1024
BULK_WALK_SHORT_RUN = 64  # runs shorter than this (strings) hand a stretch to the plain loop
BULK_WALK_LOOP_STRETCH = 512

T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL = range(8)
T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(8, 13)

# value type -> (struct format char, size in bytes)
_SCALARS: dict[int, tuple[str, int]] = {
    T_UINT8: ("B", 1),
    T_INT8: ("b", 1),
    T_UINT16: ("H", 2),
    T_INT16: ("h", 2),
    T_UINT32: ("I", 4),
    T_INT32: ("i", 4),
    T_FLOAT32: ("f", 4),
    T_BOOL: ("B", 1),
    T_UINT64: ("Q", 8),
    T_INT64: ("q", 8),
    T_FLOAT64: ("d", 8),
}
_TYPE_NAMES = {
    T_UINT8: "uint8",
    T_INT8: "int8",
    T_UINT16: "uint16",
    T_INT16: "int16",
    T_UINT32: "uint32",
    T_INT32: "int32",
    T_FLOAT32: "float32",
    T_BOOL: "bool",
    T_STRING: "string",
    T_ARRAY: "array",
    T_UINT64: "uint64",
    T_INT64: "int64",
    T_FLOAT64: "float64",
}
# Smallest possible encodings, used to bound counts before walking them.
_MIN_KV_BYTES = 8 + 1 + 4 + 1  # key length, a 1-byte key, value type, a 1-byte value
_MIN_TENSOR_BYTES = 8 + 4 + 4 + 8  # name length, n_dims, type, offset
_MIN_ARRAY_BYTES = 4 + 8  # element type, length


class ByteSource(Protocol):
    """Random access to the bytes of a file (local or remote)."""

    @property
    def name(self) -> str: ...

    @property
    def size(self) -> int | None:
        """Total size in bytes, or None when unknown."""
        ...

    @property
    def first_chunk(self) -> int:
        """How many bytes to ask for first."""
        ...

    @property
    def growth(self) -> int:
        """Each further read grows the prefix read so far by this factor (at least)."""
        ...

    def read(self, offset: int, length: int) -> bytes:
        """Up to `length` bytes from `offset` (fewer only at the end of the file)."""
        ...


class FileSource:
    """A local file, read in large chunks with plain positional reads."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        try:
            fd = open_regular_file(self._path)
        except NotRegularFileError as e:
            raise FileAccessError(
                "not a regular file (a folder, pipe, socket or device)", None, self._path
            ) from e
        except OSError as e:
            raise FileAccessError(f"cannot open: {e.strerror or e}", None, self._path) from e
        self._f = os.fdopen(fd, "rb", buffering=0)
        self._size = os.fstat(fd).st_size

    @property
    def name(self) -> str:
        return self._path

    @property
    def size(self) -> int | None:
        return self._size

    @property
    def first_chunk(self) -> int:
        return FIRST_CHUNK_LOCAL

    @property
    def growth(self) -> int:
        return 4  # local reads are cheap: fewer, larger reads copy less

    def read(self, offset: int, length: int) -> bytes:
        try:
            self._f.seek(offset)
            data = self._f.read(length)
            while 0 < len(data) < length:  # an unbuffered read may return less: read on to `length` or EOF
                more = self._f.read(length - len(data))
                if not more:
                    break
                data += more
            return data
        except OSError as e:
            raise FileAccessError(f"read failed: {e.strerror or e}", offset, self._path) from e

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> FileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Parser:
    __slots__ = ("array_limit", "buf", "byte_order", "keep_arrays", "size", "source", "structs")

    def __init__(self, source: ByteSource, keep_arrays: Collection[str], array_limit: int) -> None:
        self.source = source
        self.size = source.size
        self.buf = b""
        self.keep_arrays = frozenset(keep_arrays)
        self.array_limit = array_limit
        self.byte_order = "<"
        self.structs: dict[int, struct.Struct] = {}

    # -- buffer -------------------------------------------------------------------------------------------------

    def err(self, problem: str, offset: int | None) -> GGUFError:
        return GGUFError(problem, offset, self.source.name)

    def need(self, end: int, what: str, at: int) -> None:
        """Make sure bytes [0, end) are in the buffer, or fail naming what was being read at `at`."""
        have = len(self.buf)
        if end <= have:
            return
        size = self.size
        if size is not None and end > size:
            raise self.err(
                f"file ends at byte {size} inside the header while reading {what} ({end} needed)", at
            )
        if end > MAX_HEADER_BYTES:
            raise self.err(f"header would exceed {MAX_HEADER_BYTES} bytes while reading {what}", at)
        want = max(end, self.source.growth * have, self.source.first_chunk)
        if size is not None:
            want = min(want, size)
        want = min(want, MAX_HEADER_BYTES)
        more = self.source.read(have, want - have)
        self.buf += more
        self.size = self.source.size  # a remote source learns its size from the first answer
        if len(self.buf) < end:
            raise self.err(f"file ends at byte {len(self.buf)} inside the header while reading {what}", at)

    def remaining(self, pos: int) -> int:
        """Bytes the header may still use after `pos`: to the end of the file, and never past MAX_HEADER_BYTES."""
        if self.size is not None and self.size < MAX_HEADER_BYTES:
            return self.size - pos
        return MAX_HEADER_BYTES - pos

    # -- primitives ---------------------------------------------------------------------------------------------

    def u32(self, pos: int, what: str) -> int:
        self.need(pos + 4, what, pos)
        v: int = self.structs[T_UINT32].unpack_from(self.buf, pos)[0]
        return v

    def u64(self, pos: int, what: str) -> int:
        self.need(pos + 8, what, pos)
        v: int = self.structs[T_UINT64].unpack_from(self.buf, pos)[0]
        return v

    def string(self, pos: int, what: str) -> tuple[str, int]:
        n = self.u64(pos, f"{what} length")
        start = pos + 8
        if n > MAX_STRING_LENGTH:
            raise self.err(f"{what}: string length {n} exceeds the maximum {MAX_STRING_LENGTH}", pos)
        if n > self.remaining(start):
            raise self.err(f"{what}: string length {n} exceeds the {self.remaining(start)} bytes left", pos)
        end = start + n
        self.need(end, what, pos)
        raw = self.buf[start:end]
        try:
            return raw.decode("utf-8"), end
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="replace"), end

    # -- values -------------------------------------------------------------------------------------------------

    def value(self, vtype: int, pos: int, keep: bool, depth: int, what: str) -> tuple[MetadataValue, int]:
        sc = _SCALARS.get(vtype)
        if sc is not None:
            size = sc[1]
            self.need(pos + size, what, pos)
            v = self.structs[vtype].unpack_from(self.buf, pos)[0]
            if vtype == T_BOOL:
                v = v != 0
            return v, pos + size
        if vtype == T_STRING:
            return self.string(pos, what)
        if vtype == T_ARRAY:
            return self.array(pos, keep, depth + 1, what)
        raise self.err(f"{what}: invalid value type {vtype}", pos)

    def array(self, pos: int, keep: bool, depth: int, what: str) -> tuple[GGUFArray, int]:
        if depth > MAX_ARRAY_DEPTH:
            raise self.err(f"{what}: arrays nested deeper than {MAX_ARRAY_DEPTH}", pos)
        etype = self.u32(pos, f"{what} element type")
        n = self.u64(pos + 4, f"{what} length")
        start = pos + 12
        if n > MAX_ARRAY_ELEMENTS:
            raise self.err(f"{what}: array length {n} exceeds the maximum {MAX_ARRAY_ELEMENTS}", pos + 4)
        materialise = keep or n <= self.array_limit
        left = self.remaining(start)
        sc = _SCALARS.get(etype)
        if sc is not None:
            total = n * sc[1]
            if total > left:
                raise self.err(
                    f"{what}: array of {n} {_TYPE_NAMES[etype]} exceeds the {left} bytes left", pos + 4
                )
            end = start + total
            if not materialise:
                return GGUFArray(etype, n, None), end
            self.need(end, what, pos)
            fmt = self.byte_order + str(n) + sc[0]
            vals: tuple[MetadataValue, ...] = struct.unpack_from(fmt, self.buf, start)
            if etype == T_BOOL:
                vals = tuple(v != 0 for v in vals)
            return GGUFArray(etype, n, vals), end
        if etype == T_STRING:
            if n * 8 > left:
                raise self.err(f"{what}: array of {n} strings exceeds the {left} bytes left", pos + 4)
            if not materialise:
                return GGUFArray(etype, n, None), self.skip_strings(start, n, what)
            out: list[MetadataValue] = []
            p = start
            for _ in range(n):
                s, p = self.string(p, what)
                out.append(s)
            return GGUFArray(etype, n, tuple(out)), p
        if etype == T_ARRAY:
            if n * _MIN_ARRAY_BYTES > left:
                raise self.err(f"{what}: array of {n} arrays exceeds the {left} bytes left", pos + 4)
            items: list[MetadataValue] = []
            p = start
            for _ in range(n):
                sub, p = self.array(p, keep, depth + 1, what)
                if materialise:
                    items.append(sub)
            return GGUFArray(etype, n, tuple(items) if materialise else None), p
        raise self.err(f"{what}: invalid array element type {etype}", pos)

    def skip_strings(self, pos: int, n: int, what: str) -> int:
        """Walk `n` length-prefixed strings without building them; returns the offset after the last one.

        Long arrays go through `_walk_strings_bulk` (numpy), short ones through `_walk_strings_loop`. Errors name
        the offset of the first string (a bad length shows only when a later read falls off the end).
        """
        first = pos
        if n:
            self.need(min(pos + 8 * n, pos + self.remaining(pos)), what, first)
        if n >= BULK_WALK_MIN_STRINGS:
            pos = self._walk_strings_bulk(pos, n, what, first)
        else:
            pos = self._walk_strings_loop(pos, n, what, first)
        self.need(pos, f"{what} element {n - 1}", first)
        return pos

    def _step_string(self, pos: int, k: int, what: str, first: int) -> int:
        """One string, growing the buffer as needed: the offset after string `k` that starts at `pos`."""
        self.need(pos + 8, f"{what} element {k} length", first)
        length: int = self.structs[T_UINT64].unpack_from(self.buf, pos)[0]
        return pos + 8 + length

    def _walk_strings_loop(self, pos: int, n: int, what: str, first: int, base: int = 0) -> int:
        """The plain walk, unrolled by 8 with no bounds checks: reading past the buffer raises, and the block is
        then redone one string at a time, growing the buffer (or failing past the end of the file)."""
        u = self.structs[T_UINT64].unpack_from
        buf = self.buf
        done = 0
        while done < n:
            k = done
            bp = pos
            try:
                stop = done + ((n - done) & ~7)
                for k in range(done, stop, 8):  # noqa: B007 (k is read after an exception, to resume)
                    bp = pos
                    pos += u(buf, pos)[0] + 8
                    pos += u(buf, pos)[0] + 8
                    pos += u(buf, pos)[0] + 8
                    pos += u(buf, pos)[0] + 8
                    pos += u(buf, pos)[0] + 8
                    pos += u(buf, pos)[0] + 8
                    pos += u(buf, pos)[0] + 8
                    pos += u(buf, pos)[0] + 8
                k = done = stop
                bp = pos
                for k in range(stop, n):  # noqa: B007 (as above)
                    bp = pos
                    pos += u(buf, pos)[0] + 8
                done = n
            except (struct.error, OverflowError):
                done, pos = k, bp
                for _ in range(min(8, n - done)):
                    pos = self._step_string(pos, base + done, what, first)
                    done += 1
                buf = self.buf
        return pos

    def _walk_strings_bulk(self, pos: int, n: int, what: str, first: int) -> int:
        """The walk in bulk: in a window of the buffer, every offset whose u64 reads below 256 (a short string's
        length prefix: seven zero high bytes) is a candidate; starting from the true position, consecutive
        candidates each pointing exactly at the next one (c + 8 + len(c) == next c) are consecutive strings, so a
        whole run is taken at once. A candidate that does not chain (zero bytes inside a string, an empty string)
        ends the run at the true position after it. Windows grow while runs fill them and shrink at breaks; where
        runs stay short (many empty, zero-filled or 256+ byte strings) a stretch is walked by the plain loop, so
        awkward data costs about what the loop costs."""
        dt = np.dtype(self.byte_order + "u8")
        done = 0
        window = BULK_WALK_MIN_WINDOW
        while done < n:
            buf = self.buf
            hi = min(len(buf) - 7, pos + window)
            if hi - pos >= 64:
                v = np.ndarray((hi - pos,), dtype=dt, buffer=buf, offset=pos, strides=(1,))
                cand = np.flatnonzero(v < 256)
                if len(cand) and cand[0] == 0:
                    nxt = cand + v[cand].astype(np.int64) + 8
                    breaks = np.flatnonzero(nxt[:-1] != cand[1:])
                    run = int(breaks[0]) if len(breaks) else len(cand) - 1  # cand[0..run] chain
                    left = n - done
                    if left <= run:
                        return pos + int(cand[left])
                    pos += int(nxt[run])
                    done += run + 1
                    if not len(breaks):
                        window = min(2 * window, BULK_WALK_MAX_WINDOW)
                        continue
                    window = BULK_WALK_MIN_WINDOW
                    if run >= BULK_WALK_SHORT_RUN:
                        continue
            # a short run, a long string or the end of the buffer: a stretch with the plain loop
            k = min(BULK_WALK_LOOP_STRETCH, n - done)
            pos = self._walk_strings_loop(pos, k, what, first, base=done)
            done += k
        return pos

    # -- the header ---------------------------------------------------------------------------------------------

    def parse(self, allow_incomplete: bool) -> GGUFHeader:
        version = self._preamble()
        self.need(24, "tensor and metadata counts", 8)
        n_tensors, n_kv = struct.unpack_from(self.byte_order + "QQ", self.buf, 8)
        if n_tensors * _MIN_TENSOR_BYTES > self.remaining(24):
            raise self.err(f"tensor count {n_tensors} cannot fit in the {self.remaining(24)} bytes left", 8)
        if n_tensors > MAX_TENSORS:
            raise self.err(f"{n_tensors} tensors: more than the {MAX_TENSORS} fitplan reads in one file", 8)
        if n_kv * _MIN_KV_BYTES > self.remaining(24):
            raise self.err(f"metadata count {n_kv} cannot fit in the {self.remaining(24)} bytes left", 16)
        metadata, pos = self._metadata(n_kv, 24)
        alignment = self._alignment(metadata)
        raw, pos = self._tensor_infos(n_tensors, pos)
        tensors = self._tensors(raw, alignment)
        header = GGUFHeader(
            source=self.source.name,
            version=version,
            byte_order=self.byte_order,
            metadata=MappingProxyType(metadata),
            tensors=tensors,
            alignment=alignment,
            data_offset=-(-pos // alignment) * alignment if n_tensors else pos,
            file_size=self.size,
            header_bytes_read=len(self.buf),
        )
        if self.size is not None and not allow_incomplete and not header.header_only:
            expected_size = header.expected_file_size
            if self.size < expected_size:
                raise IncompleteModelError(self.source.name, expected_size, self.size, header=header)
        return header

    def _preamble(self) -> int:
        """Magic, byte order and version."""
        self.need(8, "magic and version", 0)
        magic = self.buf[:4]
        if magic != GGUF_MAGIC:
            raise self.err(f"not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})", 0)
        (version,) = struct.unpack_from("<I", self.buf, 4)
        if version & 0xFFFF == 0 and version != 0:
            self.byte_order = ">"
            (version,) = struct.unpack_from(">I", self.buf, 4)
        self.structs = {t: struct.Struct(self.byte_order + f) for t, (f, _) in _SCALARS.items()}
        if version == 1:
            raise self.err("GGUF version 1 is no longer supported by llama.cpp; convert the model again", 4)
        if version not in (2, 3):
            raise self.err(f"unsupported GGUF version {version} (supported: 2, 3)", 4)
        return int(version)

    def _metadata(self, n_kv: int, pos: int) -> tuple[dict[str, MetadataValue], int]:
        metadata: dict[str, MetadataValue] = {}
        keep_arrays = self.keep_arrays
        for i in range(n_kv):
            key_at = pos
            key, pos = self.string(pos, f"metadata key {i}")
            if not key:
                raise self.err(f"metadata key {i} is empty", key_at)
            if key in metadata:
                raise self.err(f"duplicate metadata key {key!r}", key_at)
            vtype = self.u32(pos, f"type of {key!r}")
            if key == "general.alignment" and vtype != T_UINT32:
                raise self.err(
                    f"general.alignment must be a uint32, not {_TYPE_NAMES.get(vtype, vtype)}", pos
                )
            value, pos = self.value(vtype, pos + 4, key in keep_arrays, 0, repr(key))
            metadata[key] = value
        return metadata, pos

    def _alignment(self, metadata: Mapping[str, MetadataValue]) -> int:
        if "general.alignment" not in metadata:
            return GGUF_DEFAULT_ALIGNMENT
        a = metadata["general.alignment"]
        if not isinstance(a, int) or isinstance(a, bool) or a <= 0 or a & (a - 1):
            raise self.err(f"general.alignment {a!r} is not a power of two", None)
        return a

    def _tensor_infos(
        self, n_tensors: int, pos: int
    ) -> tuple[list[tuple[str, int, tuple[int, ...], int, int]], int]:
        """(name, type, shape, offset, where it was read) per tensor, as the file lists them."""
        raw: list[tuple[str, int, tuple[int, ...], int, int]] = []
        names: set[str] = set()
        for i in range(n_tensors):
            at = pos
            name, pos = self.string(pos, f"tensor {i} name")
            if pos - at - 8 >= GGML_MAX_NAME:  # gguf.cpp refuses it: "tensor name ... is too long"
                raise self.err(
                    f"tensor {i} name is {pos - at - 8} bytes long (llama.cpp takes at most {GGML_MAX_NAME - 1})",
                    at,
                )
            if name in names:
                raise self.err(f"duplicate tensor name {name!r}", at)
            names.add(name)
            shape, pos = self._shape(name, pos)
            gtype = self.structs[T_INT32].unpack_from(self.buf, pos)[0]
            offset = self.structs[T_INT64].unpack_from(self.buf, pos + 4)[0]
            if offset < 0:
                raise self.err(f"tensor {name!r} has a negative data offset {offset}", pos + 4)
            raw.append((name, gtype, shape, offset, at))
            pos += 12
        return raw, pos

    def _shape(self, name: str, pos: int) -> tuple[tuple[int, ...], int]:
        n_dims = self.u32(pos, f"tensor {name!r} dimension count")
        if n_dims > MAX_DIMS:
            raise self.err(f"tensor {name!r} has {n_dims} dimensions (at most {MAX_DIMS})", pos)
        pos += 4
        self.need(pos + 8 * n_dims + 12, f"tensor {name!r} shape, type and offset", pos)
        shape: tuple[int, ...] = (
            struct.unpack_from(f"{self.byte_order}{n_dims}q", self.buf, pos) if n_dims else ()
        )
        if any(d < 0 for d in shape):
            raise self.err(f"tensor {name!r} has a negative dimension {shape}", pos)
        n_el = 1
        for d in shape:
            n_el *= d
        if n_el >= 2**63:
            raise self.err(f"tensor {name!r} shape {shape} has >= 2^63 elements", pos)
        return shape, pos + 8 * n_dims

    def _tensors(
        self, raw: list[tuple[str, int, tuple[int, ...], int, int]], alignment: int
    ) -> tuple[GGUFTensorInfo, ...]:
        """The tensor infos, types resolved (ik_llama.cpp's when the file uses them), offsets checked in order."""
        ik = ggml_types.is_ik_file(t[1] for t in raw)
        tensors: list[GGUFTensorInfo] = []
        expected = 0
        for name, gtype, shape, offset, at in raw:
            t = ggml_types.lookup(gtype, ik=ik)
            if t is None:
                raise self.err(f"tensor {name!r} has unknown ggml type {gtype}", at)
            ne0 = shape[0] if shape else 1
            if ne0 % t.block_size:
                raise self.err(
                    f"tensor {name!r} ({t.name}) row length {ne0} is not a multiple of block size {t.block_size}",
                    at,
                )
            n_bytes = ggml_types.nbytes(gtype, shape, ik=ik)
            if offset != expected:
                raise self.err(f"tensor {name!r} data offset {offset} (expected {expected})", at)
            expected = offset + -(-n_bytes // alignment) * alignment
            tensors.append(GGUFTensorInfo(name, gtype, shape, offset, n_bytes))
        return tuple(tensors)


def parse_header(
    source: ByteSource,
    *,
    keep_arrays: Collection[str] = (),
    array_limit: int = DEFAULT_ARRAY_LIMIT,
    allow_incomplete: bool = False,
) -> GGUFHeader:
    """Parse the header from any byte source. See `read_header`."""
    return _Parser(source, keep_arrays, array_limit).parse(allow_incomplete)


def read_header(
    source: str | os.PathLike[str],
    *,
    keep_arrays: Collection[str] = (),
    array_limit: int = DEFAULT_ARRAY_LIMIT,
    allow_incomplete: bool = False,
) -> GGUFHeader:
    """Read the header of a local GGUF file.

    Arrays longer than `array_limit` keep only their element type and length unless their key is in `keep_arrays`.
    A file shorter than the tensor data its header declares raises `IncompleteModelError` (whose `header` attribute
    holds the parsed header); with `allow_incomplete=True` the header is returned instead.
    """
    with FileSource(source) as src:
        return parse_header(
            src, keep_arrays=keep_arrays, array_limit=array_limit, allow_incomplete=allow_incomplete
        )


# -- split models -------------------------------------------------------------------------------------------------

#: llama.cpp llama_split_path: "%s-%05d-of-%05d.gguf" (shard numbers start at 1).
SPLIT_NAME_RE = re.compile(r"^(?P<prefix>.*)-(?P<no>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SplitName:
    """A shard file name read once: `prefix-0000k-of-0000n.gguf`; `problem` says why no such shard can exist."""

    prefix: str
    no: int
    count: int

    @property
    def problem(self) -> str:
        if self.no < 1 or self.no > self.count:
            return f"shard number {self.no} of {self.count} cannot exist (shards are numbered 1 to the count)"
        return ""


def parse_split_name(name: str) -> SplitName | None:
    """The shard numbers of a file name (the one reader of them: local files, scans and Hub listings); None when the
    name is not a shard name or names a set of one file."""
    m = SPLIT_NAME_RE.match(name)
    if m is None:
        return None
    no = int_or_none(m.group("no"), 0, MAX_SPLIT_COUNT)
    count = int_or_none(m.group("count"), 0, MAX_SPLIT_COUNT)
    if no is None or count is None or count <= 1:
        return None
    return SplitName(m.group("prefix"), no, count)


def split_shard_names(name: str, count: int | None = None) -> tuple[str, ...] | None:
    """All shard file names of the split set `name` belongs to, in order; None when the name is not a shard name."""
    m = SPLIT_NAME_RE.match(name)
    if m is None:
        return None
    named = int_or_none(m.group("count"), 0, MAX_SPLIT_COUNT) or 0
    if count is not None and count != named:
        raise GGUFError(f"split.count is {count} but the file name says {named} shards", None, name)
    n = named
    prefix = m.group("prefix")
    return tuple(f"{prefix}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1))


def split_shard_paths(path: str | os.PathLike[str], count: int | None = None) -> tuple[Path, ...] | None:
    p = Path(path)
    names = split_shard_names(p.name, count)
    return None if names is None else tuple(p.with_name(n) for n in names)


#: The shard name pattern has five digits.
MAX_SPLIT_COUNT = 99999


def _split_key(h: GGUFHeader, key: str, limit: int) -> int | None:
    """A split.* key: a whole number in [0, limit], or None when absent (anything else is refused)."""
    v = h.metadata.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= limit:
        shown = repr(v) if not isinstance(v, GGUFArray) else "an array"
        raise GGUFError(f"{key} is {shown[:40]}, not a whole number in 0..{limit}", None, h.source)
    return v


def split_count(h: GGUFHeader) -> int:
    """split.count, checked: 0 when absent, at most MAX_SPLIT_COUNT, and never more shards than tensors need
    (gguf-split writes at least one tensor per shard, the first one may hold none)."""
    count = _split_key(h, "split.count", MAX_SPLIT_COUNT) or 0
    tensors = _split_key(h, "split.tensors.count", 2**63)
    if tensors is not None and count > tensors + 1:
        raise GGUFError(
            f"split.count {count} exceeds the split.tensors.count of {tensors} tensors", None, h.source
        )
    return count


def check_split_set(shards: Sequence[GGUFHeader]) -> None:
    """Check that the headers form one complete split set of one model, in order: split.no, split.count and
    split.tensors.count agree, every shard has the first one's architecture, and no tensor is in two shards."""
    count = len(shards)
    total = 0
    first = shards[0]
    declared = _split_key(first, "split.tensors.count", 2**63)
    names: set[str] = set()
    for i, h in enumerate(shards):
        if split_count(h) != count:
            raise GGUFError(f"split.count is {split_count(h)}, expected {count}", None, h.source)
        no = _split_key(h, "split.no", MAX_SPLIT_COUNT)
        if no is not None and no != i:
            raise GGUFError(f"split.no is {no}, expected {i}", None, h.source)
        if h.architecture != first.architecture:
            raise GGUFError(
                f"shard of another model: general.architecture {h.architecture!r}, the first shard says "
                f"{first.architecture!r}",
                None,
                h.source,
            )
        theirs = _split_key(h, "split.tensors.count", 2**63)
        if declared is not None and theirs is not None and theirs != declared:
            raise GGUFError(
                f"shard of another model: split.tensors.count {theirs}, the first shard says {declared}",
                None,
                h.source,
            )
        for t in h.tensors:
            if t.name in names:
                raise GGUFError(f"tensor {t.name!r} is also in an earlier shard", None, h.source)
            names.add(t.name)
        total += len(h.tensors)
    if declared is not None and declared != total:
        raise GGUFError(
            f"split.tensors.count is {declared} but the {count} shards hold {total} tensors",
            None,
            first.source,
        )


def open_model(
    path: str | os.PathLike[str],
    *,
    mmproj: str | os.PathLike[str] | None = None,
    find_mmproj: bool = True,
    keep_arrays: Collection[str] = (),
    array_limit: int = DEFAULT_ARRAY_LIMIT,
    allow_incomplete: bool = False,
) -> ModelFiles:
    """Open a model: any shard of a split set loads the whole set in order; pairs a projector.

    `mmproj` names the projector explicitly; otherwise, with `find_mmproj`, `find_mmproj_for` looks next to the model
    (never for a file that is itself a projector). A missing shard raises `MissingShardError` naming every missing file.
    """

    def read(p: str | os.PathLike[str]) -> GGUFHeader:
        return read_header(
            p, keep_arrays=keep_arrays, array_limit=array_limit, allow_incomplete=allow_incomplete
        )

    first = read(path)
    count = split_count(first)
    shards: tuple[GGUFHeader, ...]
    if count > 1:
        paths = split_shard_paths(path, count)
        if paths is None:
            raise GGUFError(
                f"this file is one of {count} shards but its name does not follow the "
                "NAME-0000i-of-0000N.gguf pattern, so the other shards cannot be found",
                None,
                os.fspath(path),
            )
        try:  # one listing of the folder, not one stat per declared shard (a header may declare 99999)
            present = set(os.listdir(Path(path).parent))
        except OSError:
            present = set()
        missing = tuple(str(p) for p in paths if p.name not in present or not p.is_file())
        if missing:
            raise MissingShardError(os.fspath(path), missing)
        opened = Path(path).resolve()
        headers = []
        for p in paths:
            headers.append(first if p.resolve() == opened else read(p))
        shards = tuple(headers)
        check_split_set(shards)
    else:
        shards = (first,)

    proj: GGUFHeader | None = None
    if mmproj is not None:
        proj = read(mmproj)
        if not is_mmproj(proj):
            raise GGUFError(
                "not a multimodal projector (general.architecture is not 'clip')", None, proj.source
            )
    elif find_mmproj and not is_mmproj(first):
        for cand in rank_mmproj(Path(shards[0].source), mmproj_candidates(Path(path).parent, exclude=path)):
            try:
                h = read(cand)
            except GGUFError:
                continue  # a broken or partial file next to the model is not its projector
            if is_mmproj(h):
                proj = h
                break
    return ModelFiles(shards=shards, mmproj=proj)


# -- multimodal projectors ----------------------------------------------------------------------------------------


def is_mmproj(header: GGUFHeader) -> bool:
    """A multimodal projector file (llama.cpp tools/mtmd/clip.cpp loads general.architecture == "clip")."""
    return header.is_mmproj


def mmproj_candidates(
    folder: str | os.PathLike[str], *, exclude: str | os.PathLike[str] | None = None
) -> list[Path]:
    """GGUF files in `folder` whose name contains "mmproj" (case-insensitive), sorted by name."""
    skip = Path(exclude).resolve() if exclude is not None else None
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return []
    out = [
        p
        for p in entries
        if p.suffix.lower() == ".gguf" and "mmproj" in p.name.lower() and p.is_file() and p.resolve() != skip
    ]
    return sorted(out, key=lambda p: p.name)


_QUANT_TOKEN_RE = re.compile(r"^(?:i?q\d\w*|tq\d\w*|mxfp4\w*|nvfp4|b?f16|fp16|f32|fp32|f64|ud)$")
#: Preferred projector precisions when names do not decide (llama.cpp's model cards ship f16 first).
MMPROJ_PRECISION_PREFERENCE: tuple[str, ...] = ("f16", "bf16", "f32", "q8_0")


def name_tokens(file_name: str) -> list[str]:
    """The words of a model file name with the split suffix, "mmproj" and quantization tags removed."""
    stem = file_name
    m = SPLIT_NAME_RE.match(stem)
    if m:
        stem = m.group("prefix")
    stem = re.sub(r"\.gguf$", "", stem, flags=re.IGNORECASE).lower()
    return [t for t in re.split(r"[-.\s]+", stem) if t and t != "mmproj" and not _QUANT_TOKEN_RE.match(t)]


def _precision_rank(mmproj_name: str) -> int:
    lower = mmproj_name.lower()
    for i, tag in enumerate(MMPROJ_PRECISION_PREFERENCE):
        if re.search(rf"(?:^|[-_.]){re.escape(tag)}(?:[-_.]|$)", lower):
            return i
    return len(MMPROJ_PRECISION_PREFERENCE)


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def mmproj_match_key(model_name: str, mmproj_name: str) -> tuple[int, int, int, str]:
    """Sort key (smaller is better) of a projector for a model, by file names.

    The rule: most leading name words shared with the model, then most words shared anywhere, then precision
    (MMPROJ_PRECISION_PREFERENCE order, others after), then name.
    """
    mt = name_tokens(model_name)
    pt = name_tokens(mmproj_name)
    return (-_common_prefix(mt, pt), -len(set(mt) & set(pt)), _precision_rank(mmproj_name), mmproj_name)


#: At most this many projectors are ranked for one model: those nearest it in name-word order (all of them when a
#: folder or repository has this many or fewer), so pairing M models with P projectors costs O((M + P) log P).
MAX_RANKED_PROJECTORS = 16

_Projector = tuple[tuple[str, ...], str, str, int]  # name words, file name, value, precision rank


class ProjectorIndex:
    """Projector file names sorted by their name words, built once per folder or listing. The projectors sharing
    the most leading words with a model are its neighbours in that order, so `candidates` walks out from the
    model's place instead of ranking every projector, and each is ranked by `mmproj_match_key`'s rule from words
    computed once."""

    def __init__(self, items: Sequence[tuple[str, str]]) -> None:
        """`items`: (file name, value returned) of each projector."""
        self._items: list[_Projector] = sorted(
            (tuple(name_tokens(name)), name, value, _precision_rank(name)) for name, value in items
        )
        self._keys = [p[0] for p in self._items]
        self._nameless = [p for p in self._items if not p[0]][:MAX_RANKED_PROJECTORS]

    def __len__(self) -> int:
        return len(self._items)

    def candidates(self, words: tuple[str, ...]) -> list[_Projector]:
        """Up to MAX_RANKED_PROJECTORS projectors, those sharing the longest run of leading words first, and the
        first of those with no model words ("mmproj-F16.gguf": they may suit any model)."""
        if len(self._items) <= MAX_RANKED_PROJECTORS:
            return self._items
        hi = bisect.bisect_left(self._keys, words)
        lo = hi - 1
        out: list[_Projector] = []
        while len(out) < MAX_RANKED_PROJECTORS and (lo >= 0 or hi < len(self._keys)):
            up = _common_prefix(words, self._keys[hi]) if hi < len(self._keys) else -1
            down = _common_prefix(words, self._keys[lo]) if lo >= 0 else -1
            if up >= down:
                out.append(self._items[hi])
                hi += 1
            else:
                out.append(self._items[lo])
                lo -= 1
        return out + [p for p in self._nameless if p not in out]

    def best(
        self, model_name: str, allowed: Callable[[tuple[str, ...]], bool] = lambda _w: True
    ) -> str | None:
        """The value of the best projector for the model (`mmproj_match_key`'s order) among those whose name words
        are `allowed`."""
        mt = tuple(name_tokens(model_name))
        words = set(mt)
        best: tuple[tuple[int, int, int, str], str] | None = None
        for pt, name, value, prec in self.candidates(mt):
            if not allowed(pt):
                continue
            key = (-_common_prefix(mt, pt), -len(words.intersection(pt)), prec, name)
            if best is None or key < best[0]:
                best = (key, value)
        return None if best is None else best[1]


def rank_mmproj(
    model_path: str | os.PathLike[str], candidates: Sequence[str | os.PathLike[str]]
) -> list[Path]:
    """Candidates ordered best first for the model (see `mmproj_match_key`)."""
    name = Path(model_path).name
    return sorted((Path(c) for c in candidates), key=lambda c: mmproj_match_key(name, c.name))


def find_mmproj_for(model_path: str | os.PathLike[str]) -> Path | None:
    """The projector file in the model's folder that best matches it by name, or None (headers are not read)."""
    ranked = rank_mmproj(model_path, mmproj_candidates(Path(model_path).parent, exclude=model_path))
    return ranked[0] if ranked else None


# -- cross-check against llama.cpp's gguf-py ----------------------------------------------------------------------


def _flatten(v: MetadataValue) -> list[MetadataValue]:
    if isinstance(v, GGUFArray):
        out: list[MetadataValue] = []
        for x in v.values or ():
            out.extend(_flatten(x))
        return out
    return [v]


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:  # both NaN
        return True
    return type(a) is type(b) and a == b


def _diff_field(key: str, ours: MetadataValue, f: Any) -> list[str]:
    """How one metadata value differs from gguf-py's field `f` (a `gguf.ReaderField`)."""
    from gguf.constants import GGUFValueType

    t0 = int(f.types[0])
    if t0 != GGUFValueType.ARRAY:
        want = f.contents()
        if t0 == GGUFValueType.BOOL:
            want = bool(want)
        return [] if _same(ours, want) else [f"{key}: {ours!r} != {want!r}"]
    if not isinstance(ours, GGUFArray):
        return [f"{key}: array expected, got {ours!r}"]
    if len(f.types) == 1:  # gguf-py records no element type for an empty array
        return [f"{key}: length {ours.length} != 0"] if ours.length != 0 else []
    diffs: list[str] = []
    if ours.element_type != int(f.types[1]):
        diffs.append(f"{key}: element type {ours.element_type} != {int(f.types[1])}")
    nested = len(f.types) > 2
    if not nested and ours.length != len(f.data):
        diffs.append(f"{key}: length {ours.length} != {len(f.data)}")
    if ours.values is not None:
        mine = _flatten(ours)
        want = f.contents()
        if len(mine) != len(want) or not all(_same(a, b) for a, b in zip(mine, want, strict=True)):
            diffs.append(f"{key}: values differ")
    return diffs


def diff_against_gguf_py(path: str | os.PathLike[str], header: GGUFHeader) -> list[str]:
    """Differences between `header` and what gguf-py's GGUFReader reads from `path` (empty when they agree).

    Compares every metadata key, type and value (skipped arrays: element type and length; nested arrays: their
    flattened values, as gguf-py flattens them), and every tensor's name, type, shape, data offset and byte size.
    Slow (gguf-py builds every array element); meant for tests and benches.
    """

    from gguf import GGUFReader

    r = GGUFReader(os.fspath(path))
    diffs: list[str] = []
    if r.fields["GGUF.version"].contents() != header.version:
        diffs.append(f"version {header.version} != {r.fields['GGUF.version'].contents()}")
    theirs = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    if list(theirs) != list(header.metadata):
        diffs.append(f"keys differ: {sorted(set(theirs) ^ set(header.metadata))} / order")
    for key, f in theirs.items():
        if key in header.metadata:
            diffs.extend(_diff_field(key, header.metadata[key], f))
    if len(r.tensors) != len(header.tensors):
        diffs.append(f"tensor count {len(header.tensors)} != {len(r.tensors)}")
    for mine_t, rt in zip(header.tensors, r.tensors, strict=False):
        their = (
            rt.name,
            int(rt.tensor_type),
            tuple(int(d) for d in rt.shape),
            int(rt.data_offset),
            int(rt.n_bytes),
        )
        ours_t = (
            mine_t.name,
            mine_t.ggml_type,
            mine_t.shape,
            header.data_offset + mine_t.offset,
            mine_t.n_bytes,
        )
        if their != ours_t:
            diffs.append(f"tensor {mine_t.name}: {ours_t} != {their}")
    if header.tensors and r.data_offset != header.data_offset:
        diffs.append(f"data offset {header.data_offset} != {r.data_offset}")
    if r.alignment != header.alignment:
        diffs.append(f"alignment {header.alignment} != {r.alignment}")
    return diffs
