"""On-disk cache of remote GGUF headers, keyed by URL and a validator (the file's ETag, Hub object id, or size).

A second look at a repository reads nothing: the Hub's tree listing gives each file's object id (`lfs.oid`) and
size, which are the validator, so a cached header is found without asking the file's server anything. A plain URL is
validated with a 1-byte range request (its ETag, or else its size).

Entries use `header_cache`'s plain-tuple encoding (`marshal`), with a SHA-256 checksum and a size cap: a corrupt,
truncated or oversized entry is a miss (and is overwritten by the next put). The folder is `remote/` inside
`header_cache.default_cache_dir()`.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import tempfile
from pathlib import Path

from fitplan.core.gguf.header import GGUFHeader
from fitplan.core.gguf.header_cache import default_cache_dir, header_from_plain, header_to_plain

__all__ = ["MAX_ENTRY_BYTES", "RemoteHeaderCache", "validator_of"]

_FORMAT = 1
_MAGIC = b"FPRH"
#: Larger entries are neither written nor read (a header with a 262k vocabulary, arrays skipped, is ~10 MB).
MAX_ENTRY_BYTES = 64 << 20


def validator_of(etag: str | None, size: int | None) -> str | None:
    """The cache validator of a remote file: its ETag when the server gives one, else its size, else None."""
    if etag:
        tag = etag.strip()
        if tag.startswith("W/"):
            tag = tag[2:]
        return "etag:" + tag.strip('"')
    if size is not None:
        return f"size:{size}"
    return None


class RemoteHeaderCache:
    """Headers per (URL, validator, kind). `kind` names how the header was read (array limit, kept arrays)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir() / "remote"

    def _entry(self, url: str, validator: str, kind: str) -> Path:
        key = f"{url}\0{validator}\0{kind}".encode("utf-8", "surrogatepass")
        return self.directory / f"{hashlib.sha256(key).hexdigest()[:40]}.bin"

    def has(self, url: str, validator: str, kind: str = "") -> bool:
        """Whether an entry is stored for this URL and validator (`get` still checks it)."""
        return self._entry(url, validator, kind).is_file()

    def get(self, url: str, validator: str, kind: str = "") -> GGUFHeader | None:
        """The header stored for this URL and validator, or None (missing, stale, corrupt or oversized)."""
        try:
            with open(self._entry(url, validator, kind), "rb") as f:
                data = f.read(MAX_ENTRY_BYTES + 1)
        except OSError:
            return None
        if len(data) > MAX_ENTRY_BYTES or not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 32:
            return None
        digest, blob = data[len(_MAGIC) : len(_MAGIC) + 32], data[len(_MAGIC) + 32 :]
        if hashlib.sha256(blob).digest() != digest:
            return None
        try:
            fmt, s_url, s_validator, s_kind, plain = marshal.loads(blob)
            if (fmt, s_url, s_validator, s_kind) != (_FORMAT, url, validator, kind):
                return None
            return header_from_plain(plain)
        except Exception:  # noqa: BLE001 - a corrupt entry is a miss, whatever it holds
            return None

    def put(self, url: str, validator: str, header: GGUFHeader, kind: str = "") -> None:
        """Store the header; a cache that cannot be written only costs speed."""
        try:
            blob = marshal.dumps((_FORMAT, url, validator, kind, header_to_plain(header)))
            if len(blob) + len(_MAGIC) + 32 > MAX_ENTRY_BYTES:
                return
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_MAGIC + hashlib.sha256(blob).digest() + blob)
                os.replace(tmp, self._entry(url, validator, kind))
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except (OSError, ValueError):
            pass

    def clear(self) -> None:
        if self.directory.is_dir():
            for p in self.directory.glob("*.bin"):
                p.unlink(missing_ok=True)
