"""On-disk cache of parsed results, keyed by (absolute path, size, mtime_ns, ctime_ns, inode) of the model file.

Headers are stored as `marshal`-ed plain tuples (fast to load: a 262k-token vocabulary header loads in well under
5 ms because big arrays are kept only as type and length). Other results (e.g. a ModelProfile) go through `pickle`.
The folder is `platformdirs.user_cache_dir("fitplan")/profiles`, or `$FITPLAN_CACHE_DIR`, or the one given.
Unreadable, corrupt or stale entries are ignored (and overwritten by the next put).

Each entry file is `ENTRY_MAGIC`, the SHA-256 of the payload, then the payload; it is read only if it is a regular
file of at most `MAX_ENTRY_BYTES`, and its payload is decoded only if the checksum matches, so a truncated, flipped
or foreign entry is a cache miss: never a wrong header, never a huge allocation. The key is checked again inside
the payload. A rewrite of the model file that keeps its size and mtime still changes its ctime (and a copy over it
its inode), so it is noticed.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import pickle
import tempfile
from collections.abc import Collection
from pathlib import Path
from types import MappingProxyType
from typing import Any

from fitplan.core.base.files import read_regular_file
from fitplan.core.gguf.header import DEFAULT_ARRAY_LIMIT, GGUFArray, GGUFHeader, GGUFTensorInfo, MetadataValue
from fitplan.core.gguf.reader import read_header

__all__ = ["CACHE_DIR_ENV", "ProfileCache", "cached_read_header", "default_cache_dir"]

CACHE_DIR_ENV = "FITPLAN_CACHE_DIR"
_FORMAT = 2  # bump when the stored layout changes
ENTRY_MAGIC = b"FPCACHE2"
#: Entries are small (big arrays are kept as type and length only): anything larger is not ours.
MAX_ENTRY_BYTES = 64 * 1024 * 1024
_DIGEST_BYTES = 32
_HEADER_KIND = "gguf-header"


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("fitplan")) / "profiles"


def _file_key(path: str | os.PathLike[str]) -> tuple[str, int, int, int, int]:
    p = os.path.abspath(os.fspath(path))
    st = os.stat(p)
    return p, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def _encode_value(v: MetadataValue) -> Any:
    if isinstance(v, GGUFArray):
        vals = None if v.values is None else tuple(_encode_value(x) for x in v.values)
        return (v.element_type, v.length, vals)  # tuples only ever encode arrays
    return v


def _decode_value(v: Any) -> MetadataValue:
    if isinstance(v, tuple):
        et, n, vals = v
        return GGUFArray(et, n, None if vals is None else tuple(_decode_value(x) for x in vals))
    if isinstance(v, (bool, int, float, str)):
        return v
    raise ValueError(f"bad cached value {type(v).__name__}")


def header_to_plain(h: GGUFHeader) -> tuple[Any, ...]:
    """A GGUFHeader as nested plain tuples (marshal-able)."""
    return (
        h.source,
        h.version,
        h.byte_order,
        tuple((k, _encode_value(v)) for k, v in h.metadata.items()),
        tuple((t.name, t.ggml_type, t.shape, t.offset, t.n_bytes) for t in h.tensors),
        h.alignment,
        h.data_offset,
        h.file_size,
        h.header_bytes_read,
    )


def header_from_plain(t: tuple[Any, ...]) -> GGUFHeader:
    source, version, byte_order, meta, tensors, alignment, data_offset, file_size, read = t
    return GGUFHeader(
        source=source,
        version=version,
        byte_order=byte_order,
        metadata=MappingProxyType({k: _decode_value(v) for k, v in meta}),
        tensors=tuple(GGUFTensorInfo(*x) for x in tensors),
        alignment=alignment,
        data_offset=data_offset,
        file_size=file_size,
        header_bytes_read=read,
    )


class ProfileCache:
    """Cache entries per (model file, kind). `kind` names what is stored and how it was made (include options)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()

    def _entry(self, key: tuple[str, int, int, int, int], kind: str) -> Path:
        digest = hashlib.sha256(f"{key[0]}\0{kind}".encode("utf-8", "surrogatepass")).hexdigest()[:40]
        return self.directory / f"{digest}.bin"

    def _load(self, path: str | os.PathLike[str], kind: str) -> tuple[bool, Any]:
        try:
            key = _file_key(path)
            data = read_regular_file(self._entry(key, kind), MAX_ENTRY_BYTES)
        except (OSError, ValueError):
            return False, None
        head = len(ENTRY_MAGIC) + _DIGEST_BYTES
        if len(data) < head or not data.startswith(ENTRY_MAGIC):
            return False, None
        payload_bytes = data[head:]
        if hashlib.sha256(payload_bytes).digest() != data[len(ENTRY_MAGIC) : head]:
            return False, None
        try:
            stored = marshal.loads(payload_bytes)
            fmt, skey, skind, codec, payload = stored
            if fmt != _FORMAT or tuple(skey) != key or skind != kind:
                return False, None
            if codec == "pickle":
                return True, pickle.loads(payload)
            return True, payload
        except Exception:  # noqa: BLE001 - a corrupt entry is a cache miss, whatever it holds
            return False, None

    def _store(self, path: str | os.PathLike[str], kind: str, codec: str, payload: Any) -> None:
        try:
            key = _file_key(path)
            self.directory.mkdir(parents=True, exist_ok=True)
            body = marshal.dumps((_FORMAT, key, kind, codec, payload))
            blob = ENTRY_MAGIC + hashlib.sha256(body).digest() + body
            if len(blob) > MAX_ENTRY_BYTES:
                return
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                os.replace(tmp, self._entry(key, kind))
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except (OSError, ValueError):
            pass  # a cache that cannot be written only costs speed

    def get(self, path: str | os.PathLike[str], kind: str) -> Any:
        """The value stored for this file and kind, or None (missing, stale or corrupt)."""
        ok, value = self._load(path, kind)
        return value if ok and value is not None else None

    def put(self, path: str | os.PathLike[str], kind: str, value: Any) -> None:
        """Store a picklable value for the file's current (path, size, mtime)."""
        self._store(path, kind, "pickle", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    def get_header(self, path: str | os.PathLike[str], kind: str = _HEADER_KIND) -> GGUFHeader | None:
        ok, value = self._load(path, kind)
        if not ok:
            return None
        try:
            return header_from_plain(value)
        except Exception:  # noqa: BLE001 - a corrupt entry is a cache miss, whatever it holds
            return None

    def put_header(self, path: str | os.PathLike[str], header: GGUFHeader, kind: str = _HEADER_KIND) -> None:
        self._store(path, kind, "marshal", header_to_plain(header))

    def clear(self) -> None:
        if self.directory.is_dir():
            for p in self.directory.glob("*.bin"):
                p.unlink(missing_ok=True)


def cached_read_header(
    path: str | os.PathLike[str],
    *,
    cache: ProfileCache | None = None,
    keep_arrays: Collection[str] = (),
    array_limit: int = DEFAULT_ARRAY_LIMIT,
    allow_incomplete: bool = False,
) -> GGUFHeader:
    """`read_header` through the on-disk cache. Incomplete files are read every time (they are still growing)."""
    c = cache if cache is not None else ProfileCache()
    kind = f"{_HEADER_KIND}:{array_limit}:{','.join(sorted(keep_arrays))}"
    h = c.get_header(path, kind)
    if h is not None:
        return h
    h = read_header(path, keep_arrays=keep_arrays, array_limit=array_limit, allow_incomplete=allow_incomplete)
    if h.file_size is None or h.file_size >= h.expected_file_size:
        c.put_header(path, h, kind)
    return h
