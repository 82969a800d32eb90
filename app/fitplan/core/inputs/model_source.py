"""The one model loader of every surface (CLI and window): what the user names, turned into headers and a profile.

A source is a local file (any shard of a split set loads the whole set), an http(s) URL (the whole split set, by
Range requests), or a Hugging Face model: `hf.co/ORG/REPO:QUANT`, `ORG/REPO:QUANT`, or a `resolve/` URL on the Hub.
Remote headers go through `RemoteHeaderCache` (a second look reads nothing); the token (`--token` or `HF_TOKEN`)
goes only to the Hub endpoint (`remote.token_allowed`). The result says where the model came from, so a command can
use llama-server's own `-hf ORG/REPO:QUANT` for a Hub model.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fitplan.core.base.errors import FitplanError, GGUFError, MissingShardError
from fitplan.core.base.files import expand_home
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.gguf.header import GGUFHeader, ModelFiles
from fitplan.core.gguf.hub import (
    HubEntry,
    HubError,
    HubFile,
    HubListing,
    HubRef,
    forget_listings,
    group_files,
    list_repo,
    parse_hub_ref,
    projector_pairing,
)
from fitplan.core.gguf.reader import check_split_set, open_model, read_header
from fitplan.core.gguf.remote import (
    Deadline,
    HttpRangeSource,
    check_shard_count,
    hub_endpoint,
    hub_token,
    is_url,
    open_remote_model,
    read_remote_source,
)
from fitplan.core.model.builder import build_profile
from fitplan.core.model.lora import LoraAdapter, LoraError, lora_from_header
from fitplan.core.model.profile import ModelProfile

if TYPE_CHECKING:  # the header cache (hashlib, pickle) loads with the first remote read, not for a local file
    from fitplan.core.gguf.remote_cache import RemoteHeaderCache

__all__ = [
    "LoadedModel",
    "ModelOrigin",
    "ReadCounter",
    "SourceKind",
    "SourceModel",
    "SourceModels",
    "folder_entries",
    "forget_loaded",
    "is_model_collection",
    "is_remote_source",
    "load_hub_entry",
    "load_loras",
    "load_model",
    "load_source_models",
    "projector_mismatch",
    "read_cached_header",
]

_HEADER_DEADLINE_S = 60.0
_MEMO_TTL_S = 300.0
_MEMO_MAX = 128


class SourceKind(enum.StrEnum):
    FILE = "file"
    URL = "url"
    HUB = "hub"


@dataclass(frozen=True, slots=True)
class ModelOrigin:
    """Where a model came from: a path, a URL, or a Hub repository (with revision, quant tag and file)."""

    kind: SourceKind
    location: str  # the local path or the URL of the first shard
    hf_repo: str | None = None
    hf_revision: str | None = None
    hf_quant: str | None = None
    hf_file: str | None = None


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model as loaded: its headers and profile, its projector, and the argument a command gives llama-server."""

    source: str  # as the user gave it
    model_arg: str  # `-m` path, `-mu` URL, or `hf.co/ORG/REPO:QUANT` (`-hf`)
    files: ModelFiles
    profile: ModelProfile
    origin: ModelOrigin
    mmproj: ModelProfile | None = None
    mmproj_source: str | None = None  # path or URL of the projector paired with it
    mmproj_note: str = ""  # why a projector found beside the model was left out
    bytes_read: int = 0  # remote bytes read to load it (0 when every header came from the cache)
    requests: int = 0  # remote requests made (range requests, not counting the Hub listing)


@dataclass
class ReadCounter:
    """Remote reads of one load (thread-safe: shards and files may be read by a pool)."""

    bytes_read: int = 0
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, src: HttpRangeSource) -> None:
        with self._lock:
            self.bytes_read += src.bytes_received
            self.requests += src.requests


def read_cached_header(
    url: str,
    *,
    validator: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    cache: RemoteHeaderCache | None = None,
    counter: ReadCounter | None = None,
    overall: Deadline | None = None,
) -> GGUFHeader:
    """A remote header through the cache. With a known `validator` (the Hub's object id) a hit asks nothing;
    without one, a 1-byte range request learns the file's ETag or size first. `overall`: the deadline of the
    whole operation (a listing's headers), which this read's own deadline never outlasts."""
    from fitplan.core.gguf.remote_cache import RemoteHeaderCache, validator_of

    c = cache if cache is not None else RemoteHeaderCache()
    if validator is not None:
        hit = c.get(url, validator)
        if hit is not None:
            return hit
    seconds = _HEADER_DEADLINE_S if overall is None else min(_HEADER_DEADLINE_S, overall.left())
    if seconds <= 0 and overall is not None:
        raise GGUFError(
            f"not read: the {overall.seconds:g} s for all the headers of the listing were spent", None, url
        )
    src = HttpRangeSource(url, token, endpoint=endpoint, deadline=Deadline(seconds))
    try:
        if validator is None:
            src.probe()
            validator = validator_of(src.etag, src.size)
            hit = c.get(url, validator) if validator is not None else None
            if hit is not None:
                return hit
        header = read_remote_source(src)
    finally:
        if counter is not None:
            counter.add(src)
    if validator is not None:
        c.put(url, validator, header)
    return header


# -- in-process memo of remote loads (one `quants` run loads each model twice: to list it, then to plan it) -------

_MEMO: dict[tuple[object, ...], tuple[float, LoadedModel]] = {}
_MEMO_LOCK = threading.Lock()


def _memo_get(key: tuple[object, ...]) -> LoadedModel | None:
    with _MEMO_LOCK:
        hit = _MEMO.get(key)
    return hit[1] if hit is not None and time.monotonic() - hit[0] < _MEMO_TTL_S else None


def _memo_put(key: tuple[object, ...], model: LoadedModel) -> None:
    with _MEMO_LOCK:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = (time.monotonic(), model)


def forget_loaded() -> None:
    """Drop the in-process memo of remote loads and Hub listings (the on-disk header cache stays)."""
    with _MEMO_LOCK:
        _MEMO.clear()
        _PROJECTORS.clear()
        _PROJECTOR_LOCKS.clear()
    forget_listings()


# -- loaders ---------------------------------------------------------------------------------------------------------


def _mmproj_of(
    files: ModelFiles, profile: ModelProfile, built: ModelProfile | None = None
) -> tuple[ModelProfile | None, str]:
    """The paired projector's profile, or None and why it was left out (it feeds a model of another width)."""
    if files.mmproj is None:
        return None, ""
    why = projector_mismatch(files.mmproj.get_int("clip.vision.projection_dim", 0), profile)
    if why:
        return None, f"the projector in this folder {why}"
    return (built if built is not None else build_profile(files.mmproj)), ""


def projector_mismatch(width: int, model: ModelProfile) -> str:
    """Why llama-server would refuse a projector of output width `width` (clip.vision.projection_dim) with `model`
    ("mismatch between text model (n_embd) and mmproj", tools/mtmd/mtmd.cpp), or "" (unknown widths pass)."""
    if width and model.n_embd and width != model.n_embd:
        return f"is for a {width}-wide model, this one is {model.n_embd} wide"
    return ""


_PROJECTORS: dict[tuple[str, str], tuple[GGUFHeader, ModelProfile]] = {}
_PROJECTOR_LOCKS: dict[tuple[str, str], threading.Lock] = {}


def _projector(url: str, oid: str, read: Callable[[], GGUFHeader]) -> tuple[GGUFHeader, ModelProfile]:
    """A repository's projector, read and built once however many of its models pair it (even at the same time)."""
    key = (url, oid)
    with _MEMO_LOCK:
        if len(_PROJECTOR_LOCKS) >= _MEMO_MAX:
            _PROJECTOR_LOCKS.clear()
            _PROJECTORS.clear()
        lock = _PROJECTOR_LOCKS.setdefault(key, threading.Lock())
    with lock:
        hit = _PROJECTORS.get(key)
        if hit is None:
            header = read()
            hit = (header, build_profile(header))
            _PROJECTORS[key] = hit
    return hit


def _load_local(source: str, header_only: bool, find_mmproj: bool) -> LoadedModel:
    path = expand_home(source)
    files = open_model(path, find_mmproj=find_mmproj, allow_incomplete=header_only)
    profile = build_profile(files)
    mm, note = _mmproj_of(files, profile)
    origin = ModelOrigin(SourceKind.FILE, path)
    mm_src = files.mmproj.source if mm is not None and files.mmproj is not None else None
    return LoadedModel(source, path, files, profile, origin, mm, mm_src, note)


def _load_url(
    url: str, token: str | None, endpoint: str | None, cache: RemoteHeaderCache | None
) -> LoadedModel:
    counter = ReadCounter()

    def read(u: str) -> GGUFHeader:
        return read_cached_header(u, token=token, endpoint=endpoint, cache=cache, counter=counter)

    files = open_remote_model(url, token, endpoint=endpoint, reader=read)
    profile = build_profile(files)
    origin = ModelOrigin(SourceKind.URL, url)
    return LoadedModel(
        url, url, files, profile, origin, bytes_read=counter.bytes_read, requests=counter.requests
    )


def load_hub_entry(
    listing: HubListing,
    entry: HubEntry,
    *,
    token: str | None = None,
    cache: RemoteHeaderCache | None = None,
    with_mmproj: bool = True,
    source: str | None = None,
    overall: Deadline | None = None,
) -> LoadedModel:
    """One model of a listed repository: every shard's header (validated by the listing's object ids, so a cached
    header costs no request) and its paired projector."""
    first_url = listing.url(entry.first)
    if entry.missing:
        raise MissingShardError(first_url, tuple(listing.url(m) for m in entry.missing))
    check_shard_count(len(entry.files), first_url)
    counter = ReadCounter()

    def read(path: str, oid: str) -> GGUFHeader:
        return read_cached_header(
            listing.url(path), validator="oid:" + oid, token=token, endpoint=listing.endpoint, cache=cache,
            counter=counter, overall=overall,
        )  # fmt: skip

    shards = tuple(read(f.path, f.oid) for f in entry.files)
    if len(shards) > 1 or shards[0].get_int("split.count", 0) > 1:
        check_split_set(shards)
    mm_header = None
    mm_built = None
    mm_url = None
    if with_mmproj and entry.mmproj is not None:
        mm_entry = listing.find(file=entry.mmproj)
        mm_url = listing.url(mm_entry.first)
        mm_header, mm_built = _projector(
            mm_url, mm_entry.files[0].oid, lambda: read(mm_entry.first, mm_entry.files[0].oid)
        )
    files = ModelFiles(shards=shards, mmproj=mm_header)
    profile = build_profile(files)
    mm, note = _mmproj_of(files, profile, mm_built)
    origin = ModelOrigin(
        SourceKind.HUB, first_url, listing.ref.repo_id, listing.ref.revision, entry.name, entry.first
    )
    return LoadedModel(
        source if source is not None else listing.model_arg(entry), listing.model_arg(entry), files, profile,
        origin, mm, mm_url if mm is not None else None, note, counter.bytes_read, counter.requests,
    )  # fmt: skip


def _load_hub(
    source: str, ref: HubRef, token: str | None, endpoint: str | None, cache: RemoteHeaderCache | None
) -> LoadedModel:
    if ref.quant is None and ref.file is None:
        raise HubError(
            "a repository holds many models: name one (ORG/REPO:QUANT), or compare them (`fitplan quants`, or "
            "Compare quants in the window)",
            None,
            source,
        )
    listing = list_repo(ref, token, endpoint)
    entry = listing.find(quant=ref.quant, file=ref.file)
    return load_hub_entry(listing, entry, token=token, cache=cache, source=source)


#: How deep `folder_entries` looks below the folder (Hugging Face cache snapshots keep quants in subfolders).
FOLDER_DEPTH = 2
#: At most this many files are looked at in a folder.
FOLDER_MAX_FILES = 10_000


def _walk(folder: str, depth: int, base: str, out: list[HubFile]) -> None:
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        if len(out) >= FOLDER_MAX_FILES:
            return
        rel = f"{base}{e.name}"
        try:
            if e.is_dir() and depth > 0:
                _walk(e.path, depth - 1, rel + "/", out)
            elif e.is_file():  # regular files and links to them
                out.append(HubFile(rel, e.stat().st_size, ""))
        except OSError:
            continue


def folder_entries(folder: str) -> tuple[list[HubEntry], list[HubEntry], int]:
    """The models and projectors of a local folder, grouped as a repository's are (split sets as one entry);
    paths are relative to `folder`. Returns (models, projectors, non-GGUF file count)."""
    files: list[HubFile] = []
    _walk(folder, FOLDER_DEPTH, "", files)
    models, projectors, ignored = group_files(files)
    pair = projector_pairing(projectors)
    return (
        [HubEntry(m.name, m.files, m.missing, pair(m)) for m in models],
        projectors,
        ignored,
    )


def _is_hub_spelling(source: str, ref: HubRef | None) -> bool:
    if ref is None:
        return False
    if is_url(source):
        return ref.file is not None
    # `org/model:Q4_K_M` could be a relative path: an existing file wins; `models/x.gguf` (no quant, no hf.co/) is a
    # path that is missing, not a repository
    named = ref.quant is not None or source.lower().startswith(("hf.co/", "huggingface.co/"))
    return named and not os.path.exists(expand_home(source))


def is_remote_source(source: str, endpoint: str | None = None) -> bool:
    """Whether `load_model` reads `source` over the network: a URL, or a Hub reference (`hf.co/ORG/REPO:QUANT`,
    `ORG/REPO:QUANT`) that is not an existing path."""
    src = source.strip()
    return bool(src) and (is_url(src) or _is_hub_spelling(src, parse_hub_ref(src, hub_endpoint(endpoint))))


def load_model(
    source: str,
    *,
    token: str | None = None,
    endpoint: str | None = None,
    header_only: bool = False,
    find_mmproj: bool = False,
    cache: RemoteHeaderCache | None = None,
) -> LoadedModel:
    """Load a model from a path, a URL or a Hub reference (see the module docstring). `find_mmproj` pairs the
    projector beside a local file; a Hub model always gets the repository's (llama-server `-hf` loads it). Bad input is a one-line `FitplanError`."""
    src = source.strip()
    if not src:
        raise GGUFError("no model given")
    ep = hub_endpoint(endpoint)
    tok = hub_token(token)
    ref = parse_hub_ref(src, ep)
    if not is_url(src) and not _is_hub_spelling(src, ref):
        return _load_local(src, header_only, find_mmproj)
    # remote loads always pair the Hub's projector (llama-server -hf loads it), so the key leaves find_mmproj out;
    # it leaves the token out too: one process, one user (a later call without --token finds the same model)
    key: tuple[object, ...] = (src, ep)
    hit = _memo_get(key)
    if hit is not None:
        return hit
    if ref is not None and _is_hub_spelling(src, ref):
        try:
            model = _load_hub(src, ref, tok, ep, cache)
        except HubError:
            if not is_url(src):
                raise
            model = _load_url(src, tok, ep, cache)  # a resolve/ URL whose repository cannot be listed
    else:
        model = _load_url(src, tok, ep, cache)
    _memo_put(key, model)
    return model


def launch_projector(model: LoadedModel, settings: LaunchSettings) -> tuple[str | None, ModelProfile | None]:
    """The projector llama-server loads for `model` with `settings` (common/arg.cpp), as (source, profile): the one
    -mm/-mmu names (profile None: the caller loads it); else, for a model -hf downloads, the repository's own
    unless --no-mmproj; else none (-m and -mu load no projector by themselves)."""
    if settings.mmproj_path:
        return settings.mmproj_path, None
    if model.origin.kind is SourceKind.HUB and settings.mmproj_auto and model.mmproj is not None:
        return model.mmproj_source, model.mmproj
    return None, None


# -- every model of a repository or a folder -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceModel:
    """One model of a repository or folder: loaded, or the one-line reason it could not be."""

    entry: HubEntry
    model: LoadedModel | None
    error: str = ""


@dataclass(frozen=True, slots=True)
class SourceModels:
    source: str  # the folder, or `hf.co/ORG/REPO[@REV]`
    kind: SourceKind  # FILE (a folder) or HUB
    models: tuple[SourceModel, ...]
    projectors: tuple[HubEntry, ...]
    ignored: int  # non-GGUF files
    listing: HubListing | None = None

    @property
    def bytes_read(self) -> int:
        return sum(m.model.bytes_read for m in self.models if m.model is not None)

    @property
    def requests(self) -> int:
        return sum(m.model.requests for m in self.models if m.model is not None)


def _load_in_folder(folder: str, e: HubEntry) -> LoadedModel:
    """A model of a folder, with the projector paired the way a repository's is (its folder, else the root), when
    it is one llama-server can load with the model (a folder of unrelated models holds other models' projectors)."""
    m = load_model(os.path.join(folder, e.first), find_mmproj=True)
    if m.mmproj_source is None and e.mmproj is not None:
        path = os.path.join(folder, e.mmproj)
        try:
            projector = load_model(path, header_only=True).profile
        except FitplanError as exc:
            return dataclasses.replace(m, mmproj_note=f"{e.mmproj} left out: {exc}")
        why = projector_mismatch(
            projector.clip.projection_dim if projector.clip is not None else 0, m.profile
        )
        if why:
            return dataclasses.replace(m, mmproj_note=f"the projector {e.mmproj} {why}")
        m = dataclasses.replace(m, mmproj_source=path)
    return m


def _each(
    entries: Sequence[HubEntry],
    load: Callable[[HubEntry], LoadedModel],
    jobs: int,
    local: Callable[[HubEntry], bool] = lambda _e: False,
) -> tuple[SourceModel, ...]:
    """Every entry loaded, in order: those `local` says need no request in this thread (a pool's threads cost more
    to start than a cached header to read), the others `jobs` at a time."""

    def one(e: HubEntry) -> SourceModel:
        try:
            return SourceModel(e, load(e))
        except FitplanError as exc:
            return SourceModel(e, None, str(exc))
        except OSError as exc:
            return SourceModel(e, None, f"{exc.filename or e.first}: {exc.strerror or exc}")

    here = [local(e) for e in entries]
    done = {i: one(e) for i, e in enumerate(entries) if here[i]}
    remote = [i for i in range(len(entries)) if not here[i]]
    if remote:
        from concurrent.futures import ThreadPoolExecutor  # (and logging) only where something is remote

        with ThreadPoolExecutor(max_workers=max(1, min(jobs, 16, len(remote)))) as pool:
            done.update(zip(remote, pool.map(one, (entries[i] for i in remote)), strict=True))
    return tuple(done[i] for i in range(len(entries)))


def _all_cached(listing: HubListing, e: HubEntry, cache: RemoteHeaderCache) -> bool:
    """Whether every header the entry needs (its shards and its projector) is in the cache under its object id."""
    files = list(e.files)
    if e.mmproj is not None:
        try:
            files.extend(listing.find(file=e.mmproj).files[:1])
        except HubError:
            return False  # the load says why
    return all(cache.has(listing.url(f.path), "oid:" + f.oid) for f in files)


def is_model_collection(source: str, endpoint: str | None = None) -> bool:
    """A folder, or a Hub repository named without a quant (what `load_source_models` takes)."""
    if os.path.isdir(expand_home(source)):
        return True
    ref = parse_hub_ref(source, hub_endpoint(endpoint))
    return ref is not None and ref.quant is None and ref.file is None


#: The most models `load_source_models` reads from one folder or repository, and the time all their headers may
#: take together (each header also has its own deadline): a listing of thousands of quants is refused at once.
MAX_SOURCE_MODELS = 256
SOURCE_DEADLINE_S = 120.0


def _check_model_count(n: int, source: str) -> None:
    if n > MAX_SOURCE_MODELS:
        raise GGUFError(
            f"{n} models: more than the {MAX_SOURCE_MODELS} compared at once; name one (ORG/REPO:QUANT) or a "
            "smaller folder",
            None,
            source,
        )


def load_source_models(
    source: str, *, token: str | None = None, endpoint: str | None = None, jobs: int = 4
) -> SourceModels:
    """Every model of a local folder or a Hub repository (headers only, `jobs` at a time), each isolated: one that
    cannot be read carries its error. A repository spelled with a quant keeps only that one."""
    folder = expand_home(source.strip())
    if os.path.isdir(folder):
        models, projectors, ignored = folder_entries(folder)
        _check_model_count(len(models), folder)
        loaded = _each(models, lambda e: _load_in_folder(folder, e), jobs)
        return SourceModels(folder, SourceKind.FILE, loaded, tuple(projectors), ignored)
    ep = hub_endpoint(endpoint)
    ref = parse_hub_ref(source, ep)
    if ref is None:
        raise GGUFError(f"{source.strip()!r} is neither a folder nor a Hugging Face repository (ORG/REPO)")
    tok = hub_token(token)
    listing = list_repo(ref, tok, ep, fresh=True)
    entries = [e for e in listing.models if ref.quant is None or e.name.upper() == ref.quant.upper()]
    _check_model_count(len(entries), ref.spelling)
    from fitplan.core.gguf.remote_cache import RemoteHeaderCache

    cache = RemoteHeaderCache()
    overall = Deadline(SOURCE_DEADLINE_S)
    loaded = _each(
        entries,
        lambda e: load_hub_entry(listing, e, token=tok, cache=cache, overall=overall),
        jobs,
        lambda e: _all_cached(listing, e, cache),
    )
    return SourceModels(ref.spelling, SourceKind.HUB, loaded, listing.mmproj, listing.ignored, listing)


def load_loras(settings: LaunchSettings) -> tuple[LoraAdapter, ...]:
    """The LoRA adapters of `--lora` / `--lora-scaled`, read from their headers (local files, as llama.cpp reads
    them); a file that is missing or not an adapter is one line."""
    out: list[LoraAdapter] = []
    for path in settings.lora_paths:
        try:
            header = read_header(expand_home(path), allow_incomplete=True)
        except OSError as exc:
            raise LoraError(f"--lora {path}: cannot read it ({exc.strerror or exc})") from None
        except GGUFError as exc:  # names the file itself
            raise LoraError(f"--lora: {exc}") from None
        out.append(lora_from_header(header, path))
    return tuple(out)
