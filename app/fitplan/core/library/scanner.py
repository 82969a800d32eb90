"""Scan model folders: every GGUF model once, split sets as one model, projectors attached, partial downloads skipped.

* Folders are walked depth first in name order; symlinked folders and files are followed, and each folder and
  each file (by device and inode) is visited once, so link loops end and a blob reached through several hub
  snapshots, or through two roots, is one model. Hidden folders (".git", ".cache") and the `blobs` folder of a
  hub repository (it holds the same files under hash names) are not entered.
* A folder is handled as one batch: its files are summarised, `NAME-0000k-of-0000n.gguf` files are grouped into
  one model (a set missing a shard is skipped and says which), and each model gets the projector
  (`general.architecture == "clip"`) of its folder that matches it (`pick_projector`).
* An ollama store (a folder holding `manifests/` and `blobs/`) is read through its manifests: the
  `application/vnd.ollama.image.model` layer is the model, `...image.projector` its projector, `NAME:TAG` its name.
* Partial downloads are skipped with the reason: names ending in .part/.incomplete/.downloading/
  .downloadInProgress/.crdownload/.tmp, ollama's `-partial` blobs, hub blobs `HASH.incomplete` that start with
  the GGUF magic, hub links to blobs not there yet, and files shorter than their header declares
  (IncompleteModelError), unless the header says it is header-only on purpose (`fitplan.header_only = true`,
  fitplan's bundled examples): such a file is a model whose size is the declared one.
* Each file's summary is kept in a `ScanIndex` (keyed by device:inode, valid while size and mtime are unchanged),
  so rescanning an unchanged library reads no header.
* `iter_scan` yields each model or skipped file as soon as its folder is done, calls `on_progress` after every
  file, and stops at the next file once `cancel` is set.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat as stat_mod
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fitplan.core.base.errors import MAX_LISTED, FileAccessError, GGUFError, IncompleteModelError
from fitplan.core.base.files import open_regular_file, read_json_file
from fitplan.core.gguf.ggml_types import model_file_type, quant_mix, type_name
from fitplan.core.gguf.header import GGUFHeader
from fitplan.core.gguf.reader import ProjectorIndex, name_tokens, parse_split_name
from fitplan.core.library.index import IndexEntry, MemoryScanIndex, ScanIndex
from fitplan.core.library.model import (
    FileSummary,
    LibraryModel,
    LibraryRoot,
    RootKind,
    ScanProgress,
    ScanResult,
    SkippedFile,
)

HeaderReader = Callable[[str], GGUFHeader]
ProgressCallback = Callable[[ScanProgress], None]
ScanEvent = LibraryModel | SkippedFile

PARTIAL_SUFFIXES = (".part", ".incomplete", ".downloading", ".downloadinprogress", ".crdownload", ".tmp")
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_PROJECTOR_LAYER = "application/vnd.ollama.image.projector"
OLLAMA_DEFAULT_HOST = "registry.ollama.ai"
#: An ollama layer digest: the only form that names a file inside blobs/ (no "../x", no absolute path).
OLLAMA_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
#: Real manifests are a few kB; anything larger is not one.
MAX_MANIFEST_BYTES = 1024 * 1024
#: The most files and folders one root's walk lists (a library holds thousands; a link to a huge tree is cut).
MAX_ROOT_ENTRIES = 200_000


def default_reader() -> HeaderReader:
    """The project's GGUF header reader (imported only when a header has to be read). A caller that will open the
    models afterwards can pass `fitplan.core.gguf.header_cache.cached_read_header` instead, so that the headers read
    by the scan land in the profile cache (it costs a cache write per file: about a quarter of a cold scan)."""
    from fitplan.core.gguf.reader import read_header

    return read_header


def file_type_name(header: GGUFHeader) -> str:
    """The model's quantization label, as the profile gives it (`ggml_types.model_file_type`)."""
    mix = quant_mix((type_name(t.ggml_type), t.n_bytes) for t in header.tensors)
    return model_file_type(header.metadata.get("general.file_type"), mix)


#: The most characters of a header's text (architecture, name) a scan keeps: a table of models pads every row to
#: its widest cell, so one 16 MiB name would cost gigabytes.
MAX_SUMMARY_TEXT = 200


def _shown_text(text: str) -> str:
    return text if len(text) <= MAX_SUMMARY_TEXT else text[: MAX_SUMMARY_TEXT - 1] + "\u2026"


def summarise_header(header: GGUFHeader) -> FileSummary:
    arch = header.architecture
    n_params = 0
    for t in header.tensors:
        n = 1
        for d in t.shape:
            n *= d
        n_params += n
    split_count = header.get_int("split.count", 1)
    return FileSummary(
        architecture=_shown_text(arch),
        name=_shown_text(header.get_str("general.name")),
        file_type=file_type_name(header),
        n_params=n_params,
        n_ctx_train=header.get_int(f"{arch}.context_length"),
        n_layer=header.get_int(f"{arch}.block_count"),
        split_no=header.get_int("split.no", 0),
        split_count=split_count if split_count > 0 else 1,
        expected_size=header.expected_file_size,
        is_mmproj=header.is_mmproj,
        header_bytes=header.header_bytes_read,
        header_only=header.header_only,
    )


def _is_partial_name(name: str) -> bool:
    low = name.lower()
    return ".gguf" in low and low.endswith(PARTIAL_SUFFIXES)


def _incomplete_reason(size: int, expected: int) -> str:
    return f"incomplete download: {size} of {expected} bytes present, {expected - size} bytes missing"


@dataclass
class _Found:
    path: str
    st: os.stat_result
    summary: FileSummary


@dataclass
class _Counters:
    files_seen: int = 0
    models: int = 0
    skipped: int = 0
    headers_read: int = 0
    header_bytes: int = 0


@dataclass
class _ScanState:
    cancel: threading.Event | None
    on_progress: ProgressCallback | None
    seen_files: set[tuple[int, int]] = field(default_factory=set)
    seen_dirs: set[tuple[int, int]] = field(default_factory=set)
    counters: _Counters = field(default_factory=_Counters)

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def progress(self, current: str) -> None:
        if self.on_progress is not None:
            c = self.counters
            self.on_progress(
                ScanProgress(c.files_seen, c.models, c.skipped, c.headers_read, c.header_bytes, current)
            )


class LibraryScanner:
    """Scans roots for models. `reader` reads one GGUF header (injected so tests can count reads); `index` caches."""

    def __init__(self, reader: HeaderReader | None = None, index: ScanIndex | None = None) -> None:
        self._reader = reader
        self.index: ScanIndex = index if index is not None else MemoryScanIndex()
        self.last_counters = _Counters()

    # -- public -------------------------------------------------------------------------------------------------

    def iter_scan(
        self,
        roots: Iterable[LibraryRoot],
        cancel: threading.Event | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Iterator[ScanEvent]:
        state = _ScanState(cancel, on_progress)
        self.last_counters = state.counters
        try:
            for root in roots:
                if state.cancelled:
                    return
                for event in self._isolated_root(root, state):
                    if isinstance(event, LibraryModel):
                        state.counters.models += 1
                    else:
                        state.counters.skipped += 1
                    yield event
        finally:
            with contextlib.suppress(OSError, ValueError):  # an index that cannot be written costs speed only
                self.index.save()

    def _isolated_root(self, root: LibraryRoot, state: _ScanState) -> Iterator[ScanEvent]:
        """The root's events; a failure the per-file checks did not foresee ends this root only, with a reason."""
        try:
            yield from self._scan_root(root, state)
        except (OSError, ValueError, RecursionError, MemoryError) as exc:
            yield SkippedFile(root.path, f"scan stopped: {type(exc).__name__}: {exc}")

    def scan(
        self,
        roots: Iterable[LibraryRoot],
        cancel: threading.Event | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> ScanResult:
        models: list[LibraryModel] = []
        skipped: list[SkippedFile] = []
        for event in self.iter_scan(roots, cancel, on_progress):
            (models if isinstance(event, LibraryModel) else skipped).append(event)  # type: ignore[arg-type]
        c = self.last_counters
        return ScanResult(
            models=tuple(models),
            skipped=tuple(skipped),
            headers_read=c.headers_read,
            header_bytes_read=c.header_bytes,
            cancelled=cancel is not None and cancel.is_set(),
        )

    # -- roots ----------------------------------------------------------------------------------------------------

    def _scan_root(self, root: LibraryRoot, state: _ScanState) -> Iterator[ScanEvent]:
        path = Path(root.path)
        try:
            st = path.stat()
        except OSError:
            if root.kind is RootKind.FOLDER:
                yield SkippedFile(root.path, "folder not found")
            return
        if stat_mod.S_ISREG(st.st_mode):  # a file named directly
            found = self._summarise_files([(str(path), st)], state)
            if found is not None:
                yield from self._batch_events(str(path.parent), found, root, state)
            return
        if (path / "manifests").is_dir() and (path / "blobs").is_dir():
            yield from self._scan_ollama(path, root, state)
            return
        yield from self._walk(path, root, state)

    def _walk(self, top: Path, root: LibraryRoot, state: _ScanState) -> Iterator[ScanEvent]:
        try:
            top_st = top.stat()
        except OSError as exc:
            yield SkippedFile(str(top), f"unreadable folder: {exc.strerror or exc}")
            return
        if (top_st.st_dev, top_st.st_ino) in state.seen_dirs:
            return
        state.seen_dirs.add((top_st.st_dev, top_st.st_ino))
        top_real = os.path.realpath(top)
        stack = [str(top)]
        entries_seen = 0
        while stack:
            if state.cancelled:
                return
            folder = stack.pop()
            state.progress(folder)
            try:
                with os.scandir(folder) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as exc:
                yield SkippedFile(folder, f"unreadable folder: {exc.strerror or exc}")
                continue
            entries_seen += len(entries)
            if entries_seen > MAX_ROOT_ENTRIES:
                yield SkippedFile(
                    folder, f"scan of {top} stopped: more than {MAX_ROOT_ENTRIES} files and folders under it"
                )
                return
            names = {e.name for e in entries}
            if folder != str(top) and "manifests" in names and "blobs" in names:
                yield from self._scan_ollama(Path(folder), root, state)  # an ollama store inside a folder
                continue
            files: list[tuple[str, os.stat_result]] = []
            subdirs: list[str] = []
            in_hub_repo = os.path.basename(folder).startswith("models--")
            for e in entries:
                yield from self._classify(e, in_hub_repo, state, files, subdirs, top_real)
            if files:
                found = self._summarise_files(files, state)
                if found is None:
                    return
                yield from self._batch_events(folder, found, root, state)
            stack.extend(reversed(subdirs))

    def _classify(
        self,
        e: os.DirEntry[str],
        in_hub_repo: bool,
        state: _ScanState,
        files: list[tuple[str, os.stat_result]],
        subdirs: list[str],
        top_real: str,
    ) -> Iterator[ScanEvent]:
        """One folder entry: a folder to walk (into `subdirs`), a model file (into `files`), or what was skipped."""
        try:
            is_dir = e.is_dir()
            is_file = not is_dir and e.is_file()
        except OSError:
            is_dir = is_file = False
        if is_dir:
            if in_hub_repo and e.name == "blobs":
                yield from _hub_partial_blobs(e.path)
                return
            entered = _subfolder(e, state, top_real)
            if isinstance(entered, SkippedFile):
                yield entered
            elif entered is not None:
                subdirs.append(entered)
            return
        if _is_partial_name(e.name):
            state.counters.files_seen += 1
            yield SkippedFile(e.path, "partial download")
        elif e.name.lower().endswith(".gguf"):
            if not is_file:
                state.counters.files_seen += 1
                yield SkippedFile(e.path, "link to a file that is not there (download not finished?)")
                return
            try:
                files.append((e.path, e.stat()))
            except OSError as exc:
                yield SkippedFile(e.path, f"unreadable: {exc.strerror or exc}")

    # -- files ----------------------------------------------------------------------------------------------------

    def _summarise_files(
        self, files: list[tuple[str, os.stat_result]], state: _ScanState
    ) -> list[_Found | SkippedFile] | None:
        """The files' summaries (or why each is skipped); None when cancelled before the last one (a folder half
        read would show split sets as missing shards)."""
        out: list[_Found | SkippedFile] = []
        for path, st in files:
            if state.cancelled:
                return None
            ident = (st.st_dev, st.st_ino)
            if ident in state.seen_files:
                continue
            state.seen_files.add(ident)
            state.counters.files_seen += 1
            if not stat_mod.S_ISREG(
                st.st_mode
            ):  # a FIFO, socket or device (also behind a link): never opened
                out.append(SkippedFile(path, "not a regular file (a pipe, socket or device)"))
                continue
            result = self._summary_of(path, st, state)
            state.progress(path)
            if isinstance(result, str):
                out.append(SkippedFile(path, result))
            elif st.st_size < result.expected_size and not result.header_only:
                out.append(SkippedFile(path, _incomplete_reason(st.st_size, result.expected_size)))
            else:
                out.append(_Found(path, st, result))
        return out

    def _summary_of(self, path: str, st: os.stat_result, state: _ScanState) -> FileSummary | str:
        """The file's summary or why it is skipped. Each file is isolated: whatever its header holds, the answer is
        a reason, never an exception. Only what the file's bytes decide is cached (keyed by inode, size, mtime and
        ctime, so a rewrite that keeps size and mtime is noticed); OS errors (permissions, a file that vanished)
        and unforeseen failures are answered afresh next time."""
        key = f"{st.st_dev}:{st.st_ino}"
        ctime = st.st_ctime_ns
        cached = self.index.get(key, st.st_size, st.st_mtime_ns, ctime)
        if cached is not None:
            return cached.summary if cached.summary is not None else cached.error
        if self._reader is None:
            self._reader = default_reader()
        state.counters.headers_read += 1
        try:
            header = self._reader(path)
            summary = summarise_header(header)
        except (
            IncompleteModelError
        ) as exc:  # header-only files (HEADER_ONLY_KEY) are complete: the reader says so
            reason = _incomplete_reason(exc.actual_size, exc.expected_size)
            self.index.put(key, IndexEntry(st.st_size, st.st_mtime_ns, None, reason, path, ctime))
            return reason
        except FileAccessError as exc:
            return f"unreadable: {exc.problem}"  # may be transient (permissions): not cached
        except GGUFError as exc:
            reason = f"not a readable GGUF file: {exc.problem}"
            self.index.put(key, IndexEntry(st.st_size, st.st_mtime_ns, None, reason, path, ctime))
            return reason
        except OSError as exc:
            return f"unreadable: {exc.strerror or exc}"  # may be transient (permissions): not cached
        except Exception as exc:  # noqa: BLE001 - one file fitplan cannot handle must not end the scan
            return f"could not be read: {type(exc).__name__}: {exc}"[:300]
        state.counters.header_bytes += header.header_bytes_read
        self.index.put(key, IndexEntry(st.st_size, st.st_mtime_ns, summary, "", path, ctime))
        return summary

    # -- grouping -------------------------------------------------------------------------------------------------

    def _batch_events(
        self, folder: str, found: list[_Found | SkippedFile], root: LibraryRoot, state: _ScanState
    ) -> Iterator[ScanEvent]:
        models: list[_Found] = []
        projectors: list[_Found] = []
        splits: dict[tuple[str, int], dict[int, _Found]] = {}
        for f in found:
            if isinstance(f, SkippedFile):
                yield f
                continue
            split = parse_split_name(os.path.basename(f.path))
            if f.summary.is_mmproj:
                projectors.append(f)
            elif split is not None and split.problem:
                yield SkippedFile(f.path, split.problem)
            elif split is not None:
                splits.setdefault((split.prefix, split.count), {})[split.no] = f
            elif f.summary.split_count > 1:
                yield SkippedFile(
                    f.path, "one part of a split model whose file names do not follow -0000k-of-0000n"
                )
            else:
                models.append(f)
        if projectors and not models and not splits:
            for p in projectors:
                yield SkippedFile(p.path, "projector (mmproj) with no model in its folder")
        groups: list[tuple[str, list[_Found]]] = [(f.path, [f]) for f in models]
        yield from _complete_splits(splits, groups)
        index = ProjectorIndex([(os.path.basename(p.path), p.path) for p in projectors])
        for first, shards in sorted(groups, key=lambda g: g[0]):
            yield self._model(shards, root, pick_projector(first, index))

    @staticmethod
    def _model(
        shards: list[_Found],
        root: LibraryRoot,
        mmproj: str | None,
        display: str = "",
        aliases: tuple[str, ...] = (),
    ) -> LibraryModel:
        first = shards[0]
        s = first.summary
        return LibraryModel(
            path=first.path,
            shard_paths=tuple(f.path for f in shards),
            display_name=display or display_name(first.path, root),
            root_kind=root.kind,
            architecture=s.architecture,
            name=s.name,
            file_type=s.file_type,
            file_size=sum(f.st.st_size for f in shards),
            n_params=sum(f.summary.n_params for f in shards),
            n_ctx_train=s.n_ctx_train,
            n_layer=s.n_layer,
            mmproj_path=mmproj,
            aliases=aliases,
            expected_size=sum(f.summary.expected_size for f in shards),
            header_only=any(f.summary.header_only for f in shards),
        )

    # -- ollama ---------------------------------------------------------------------------------------------------

    def _scan_ollama(self, store: Path, root: LibraryRoot, state: _ScanState) -> Iterator[ScanEvent]:
        manifests = store / "manifests"
        blobs = store / "blobs"
        by_digest: dict[
            str, list[tuple[str, str | None, str]]
        ] = {}  # model digest -> (name, projector, manifest)
        yield from _read_manifests(manifests, by_digest)
        try:
            partials = sorted(p for p in os.listdir(blobs) if p.endswith("-partial"))
        except OSError as exc:
            yield SkippedFile(str(blobs), f"unreadable folder: {exc.strerror or exc}")
            return
        for p in partials:
            yield SkippedFile(str(blobs / p), "partial download (ollama pull not finished)")
        for digest, tags in sorted(by_digest.items(), key=lambda kv: kv[1][0][0]):
            if state.cancelled:
                return
            names = tuple(t[0] for t in tags)
            blob = blobs / digest.replace(":", "-")  # safe: parse_ollama_manifest accepts only sha256:HEX
            try:
                st = blob.stat()
            except OSError:
                yield SkippedFile(tags[0][2], f"model blob {blob.name} is missing")
                continue
            found = self._summarise_files([(str(blob), st)], state)
            if found is None:
                return
            if not found:
                continue  # the same blob was already seen through another root
            f = found[0]
            if isinstance(f, SkippedFile):
                yield SkippedFile(f.path, f"{names[0]}: {f.reason}")
                continue
            projector = next((t[1] for t in tags if t[1]), None)
            mmproj = str(blobs / projector.replace(":", "-")) if projector else None
            if mmproj is not None and not os.path.exists(mmproj):
                mmproj = None
            yield self._model([f], root, mmproj, display=names[0], aliases=names[1:])


def _subfolder(e: os.DirEntry[str], state: _ScanState, top_real: str) -> str | SkippedFile | None:
    """The folder to walk into, why it is skipped, or None (hidden, or already walked through another path)."""
    if e.name.startswith("."):
        return None
    try:
        dst = e.stat()
    except OSError as exc:
        return SkippedFile(e.path, f"unreadable folder: {exc.strerror or exc}")
    ident = (dst.st_dev, dst.st_ino)
    if ident in state.seen_dirs:
        return None  # a link loop, or a folder already scanned through another path
    if e.is_symlink() and _holds(os.path.realpath(e.path), top_real):
        return SkippedFile(e.path, "link to a folder that holds the scanned folder: not followed")
    state.seen_dirs.add(ident)
    return e.path


def _holds(folder: str, path: str) -> bool:
    """Whether `folder` is `path` or one of the folders above it (a link to it would walk the scanned folder's
    parents: a link to / the whole disk)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _complete_splits(
    splits: dict[tuple[str, int], dict[int, _Found]], groups: list[tuple[str, list[_Found]]]
) -> Iterator[SkippedFile]:
    """Each complete split set into `groups` (first shard's path, shards in order); the parts of an incomplete
    one skipped with the shards they miss."""
    for (prefix, count), parts in splits.items():
        n_missing = count - len(parts)
        if n_missing:
            missing = [f"{prefix}-{i:05d}-of-{count:05d}.gguf" for i in _first_missing(parts, count)]
            more = f" and {n_missing - len(missing)} more" if n_missing > len(missing) else ""
            for f in parts.values():
                yield SkippedFile(f.path, "missing shard(s): " + ", ".join(missing) + more)
            continue
        shards = [parts[i] for i in range(1, count + 1)]
        groups.append((shards[0].path, shards))


def _first_missing(parts: Collection[int], count: int, limit: int = MAX_LISTED) -> list[int]:
    """The first `limit` shard numbers in 1..count not in `parts` (without walking all of a huge count)."""
    out: list[int] = []
    i = 1
    while len(out) < limit and i <= count:
        if i not in parts:
            out.append(i)
        i += 1
    return out


def pick_projector(model_path: str, projectors: ProjectorIndex | list[str]) -> str | None:
    """The projector of the model's folder that belongs to it, best match first (the reader's ranking).

    A projector whose name has no model words ("mmproj-F16.gguf", the layout of a Hugging Face repo) goes with
    every model of its folder; a named one ("mmproj-gemma-3-4b-f16.gguf") only with models whose name starts
    with the same word, so a flat folder of unrelated models does not pair them with a stranger's projector.
    """
    if not isinstance(projectors, ProjectorIndex):
        projectors = ProjectorIndex([(os.path.basename(p), p) for p in projectors])
    model = os.path.basename(model_path)
    first_word = name_tokens(model)[:1]

    def fits(words: tuple[str, ...]) -> bool:
        return not words or list(words[:1]) == first_word

    return projectors.best(model, fits)


def _hub_partial_blobs(blobs: str) -> Iterator[SkippedFile]:
    """Hub downloads in progress (`blobs/HASH.incomplete`) that are GGUF files: their snapshot link comes last."""
    try:
        names = sorted(n for n in os.listdir(blobs) if n.endswith(".incomplete"))
    except OSError:
        return
    repo = os.path.basename(os.path.dirname(blobs)).removeprefix("models--").replace("--", "/")
    for n in names:
        path = os.path.join(blobs, n)
        try:
            with os.fdopen(open_regular_file(path), "rb") as f:  # a FIFO or device is never read
                magic = f.read(4)
        except OSError:
            continue
        if magic == b"GGUF":
            yield SkippedFile(path, f"partial download ({repo}, Hugging Face hub)")


def parse_ollama_manifest(path: str, manifests_root: Path) -> tuple[str, str, str | None] | str:
    """(NAME:TAG, model layer digest, projector digest) of one manifest, or why it cannot be used."""
    rel = Path(os.path.relpath(path, manifests_root)).parts
    try:
        doc = read_json_file(path, MAX_MANIFEST_BYTES)
    except (OSError, ValueError) as exc:
        return f"unreadable ollama manifest: {exc}"
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list):
        return "ollama manifest without layers"
    model = projector = None
    for layer in layers:
        if not isinstance(layer, dict):
            continue
        digest = layer.get("digest")
        media = layer.get("mediaType")
        if media not in (OLLAMA_MODEL_LAYER, OLLAMA_PROJECTOR_LAYER):
            continue
        if not isinstance(digest, str) or not OLLAMA_DIGEST_RE.match(digest):
            return f"ollama manifest with a malformed digest {str(digest)[:80]!r} (expected sha256:<64 hex digits>)"
        if media == OLLAMA_MODEL_LAYER:
            model = digest
        else:
            projector = digest
    if model is None:
        return "ollama manifest without a model layer"
    return ollama_name(rel), model, projector


def ollama_name(parts: tuple[str, ...]) -> str:
    """manifests/HOST/NAMESPACE/NAME/TAG -> "NAME:TAG" for the default registry and library, else the full name."""
    if len(parts) < 2:
        return ":".join(parts)
    *repo, tag = parts
    if len(repo) >= 3 and repo[0] == OLLAMA_DEFAULT_HOST:
        repo = repo[1:]
        if repo[0] == "library":
            repo = repo[1:]
    return "/".join(repo) + ":" + tag


_HUB_RE = re.compile(r"(?:^|/)models--(?P<repo>[^/]+)/snapshots/[^/]+/(?P<rest>.+)$")


def display_name(path: str, root: LibraryRoot) -> str:
    """ "org/repo: file.gguf" inside a hub cache, else the path under its root."""
    posix = path.replace(os.sep, "/")
    m = _HUB_RE.search(posix)
    if m:
        return m.group("repo").replace("--", "/") + ": " + m.group("rest")
    try:
        rel = os.path.relpath(path, root.path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel.replace(os.sep, "/")


def _read_manifests(
    manifests: Path, by_digest: dict[str, list[tuple[str, str | None, str]]]
) -> Iterator[ScanEvent]:
    """Every ollama manifest under `manifests` into `by_digest` (model digest -> (name, projector, manifest)); the
    unreadable ones skipped."""
    for dirpath, dirnames, filenames in os.walk(manifests, onerror=None):
        dirnames.sort()
        for fn in sorted(filenames):
            mpath = os.path.join(dirpath, fn)
            parsed = parse_ollama_manifest(mpath, manifests)
            if isinstance(parsed, str):
                yield SkippedFile(mpath, parsed)
                continue
            name, model_digest, projector_digest = parsed
            by_digest.setdefault(model_digest, []).append((name, projector_digest, mpath))
