"""The scan index: what a scan learned about each GGUF file, kept on disk so an unchanged file is never re-read.

An entry is keyed by the file's identity (device and inode, so a file reached through two links or two roots is
one entry) and is valid only while the file keeps its size, modification time and status-change time (nanoseconds:
a rewrite that restores size and mtime still moves ctime). It holds either the file's `FileSummary` or the reason it
could not be read as a model (a file that is not GGUF stays unread too). OS errors are never stored.

The index file is a cache: one that is too large, too deeply nested, not JSON, or of another schema starts an empty
index; an entry with a field of the wrong type or out of range (`Infinity`, `1e400`) is dropped alone.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fitplan.core.base.files import read_json_file
from fitplan.core.library.model import FileSummary

INDEX_SCHEMA = (
    3  # 2: header-only files are models (schema 1 cached them as incomplete); 3: entries hold ctime_ns
)
#: The largest index read back (about 150 bytes an entry: a million files).
MAX_INDEX_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class IndexEntry:
    size: int
    mtime_ns: int
    summary: FileSummary | None = None
    error: str = ""  # why the file is not a usable model, when summary is None
    path: str = ""  # where the file was seen (to forget entries of deleted files)
    ctime_ns: int = 0  # status-change time when read


class ScanIndex(Protocol):
    def get(self, key: str, size: int, mtime_ns: int, ctime_ns: int = 0) -> IndexEntry | None: ...

    def put(self, key: str, entry: IndexEntry) -> None: ...

    def save(self) -> None: ...


class MemoryScanIndex:
    """An index that lives as long as the object (tests; a scan with no cache folder)."""

    def __init__(self) -> None:
        self.entries: dict[str, IndexEntry] = {}

    def get(self, key: str, size: int, mtime_ns: int, ctime_ns: int = 0) -> IndexEntry | None:
        e = self.entries.get(key)
        if e is None or (e.size, e.mtime_ns, e.ctime_ns) != (size, mtime_ns, ctime_ns):
            return None
        return e

    def put(self, key: str, entry: IndexEntry) -> None:
        self.entries[key] = entry

    def save(self) -> None:
        return None


def _whole(v: object) -> int:
    """A stored whole number (no bool, no float: `1e400` and `Infinity` are floats)."""
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError("not a whole number")
    return v


class JsonScanIndex(MemoryScanIndex):
    """The index as one JSON file, loaded on creation and written atomically by `save` (only if it changed).

    A missing, unreadable or foreign file starts an empty index: the cache can always be rebuilt. On save, entries
    not used since loading whose file no longer exists are dropped, so the index does not grow without bound.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._dirty = False
        self._used: set[str] = set()
        self._load()

    def get(self, key: str, size: int, mtime_ns: int, ctime_ns: int = 0) -> IndexEntry | None:
        e = super().get(key, size, mtime_ns, ctime_ns)
        if e is not None:
            self._used.add(key)
        return e

    def _load(self) -> None:
        try:
            doc = read_json_file(self.path, MAX_INDEX_BYTES)
        except (OSError, ValueError):
            return
        if (
            not isinstance(doc, dict)
            or doc.get("schema") != INDEX_SCHEMA
            or not isinstance(doc.get("files"), dict)
        ):
            return
        for key, row in doc["files"].items():
            try:
                summary = FileSummary.from_dict(row["summary"]) if row.get("summary") is not None else None
                self.entries[str(key)] = IndexEntry(
                    size=_whole(row["size"]),
                    mtime_ns=_whole(row["mtime_ns"]),
                    summary=summary,
                    error=str(row.get("error", "")),
                    path=str(row.get("path", "")),
                    ctime_ns=_whole(row["ctime_ns"]),
                )
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError):
                continue

    def put(self, key: str, entry: IndexEntry) -> None:
        self._used.add(key)
        if self.entries.get(key) != entry:
            self.entries[key] = entry
            self._dirty = True

    def _forget_deleted(self) -> None:
        for key in [k for k in self.entries if k not in self._used]:
            if not os.path.exists(self.entries[key].path):
                del self.entries[key]
                self._dirty = True

    def save(self) -> None:
        self._forget_deleted()
        if not self._dirty:
            return
        files = {
            key: {
                "size": e.size,
                "mtime_ns": e.mtime_ns,
                "summary": e.summary.to_dict() if e.summary is not None else None,
                "error": e.error,
                "path": e.path,
                "ctime_ns": e.ctime_ns,
            }
            for key, e in self.entries.items()
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".scan-index-", suffix=".json", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                # one dumps() call: the C encoder (json.dump() encodes piece by piece in Python, 5x slower)
                f.write(json.dumps({"schema": INDEX_SCHEMA, "files": files}, separators=(",", ":")))
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._dirty = False


def default_index_path() -> Path:
    """`$FITPLAN_CACHE_DIR/scan-index.json` when set, else in the user's cache folder."""
    env = os.environ.get("FITPLAN_CACHE_DIR")
    if env:
        return Path(env) / "scan-index.json"
    import platformdirs

    return Path(platformdirs.user_cache_dir("fitplan", appauthor=False)) / "scan-index.json"
