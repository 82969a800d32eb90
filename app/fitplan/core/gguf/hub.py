"""Hugging Face Hub repositories: their spellings, their GGUF files (tree API) and the llama-server `-hf` reference.

Spellings of a repository: `ORG/REPO`, `hf.co/ORG/REPO`, `huggingface.co/ORG/REPO`, `https://huggingface.co/ORG/REPO`
(or the `HF_ENDPOINT` host), each with an optional revision (`@REV`, or `/tree/REV` in a URL) and, for one model,
an optional quant (`:Q4_K_M`, llama-server's `-hf ORG/REPO:QUANT`). A file is `.../ORG/REPO/resolve/REV/PATH` or
`.../blob/REV/PATH`.

The file list is `GET {endpoint}/api/models/ORG/REPO/tree/REV?recursive=true` (paginated by `Link: rel="next"`),
through `remote.http_get`: the token goes only to the endpoint. GGUF files only; a split set
(`NAME-0000i-of-0000N.gguf`) is one entry; files named `*mmproj*` are projectors, paired with each model by name
(`reader.mmproj_match_key`, same folder first).
"""

from __future__ import annotations

import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fitplan.core.base.errors import GGUFError
from fitplan.core.base.numbers import loads_json
from fitplan.core.gguf.reader import SPLIT_NAME_RE, ProjectorIndex, parse_split_name
from fitplan.core.gguf.remote import Deadline, hf_resolve_url, http_get, hub_endpoint

__all__ = [
    "HF_REF_PREFIX",
    "HubEntry",
    "HubError",
    "HubFile",
    "HubListing",
    "HubRef",
    "forget_listings",
    "hf_arg",
    "list_repo",
    "parse_hub_ref",
    "quant_label",
]

#: The model argument fitplan writes for a Hub model (ollama's spelling); `hf_arg` turns it into `-hf ORG/REPO:Q`.
HF_REF_PREFIX = "hf.co/"
_HUB_HOSTS = frozenset({"hf.co", "huggingface.co", "www.huggingface.co"})
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_REPO_RE = re.compile(rf"^(?P<repo>{_NAME}/{_NAME})(?:@(?P<rev>[^:\s]+))?(?::(?P<quant>[A-Za-z0-9._-]+))?$")
_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:I?Q\d+(?:_[A-Z0-9]+)*|TQ\d_\d|MXFP4(?:_MOE)?|NVFP4|BF16|F16|FP16|F32|FP32|FP8))"
    r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)
LIST_DEADLINE_S = 60.0
MAX_PAGES = 50
#: Listings are kept this long in the process (one `fitplan quants` or one window session asks once).
LISTING_TTL_S = 300.0


class HubError(GGUFError):
    """A Hub repository could not be listed or a reference could not be resolved."""


@dataclass(frozen=True, slots=True)
class HubRef:
    """A repository (with revision), and optionally one model in it (a quant tag or a file path)."""

    repo_id: str
    revision: str = "main"
    quant: str | None = None
    file: str | None = None

    @property
    def spelling(self) -> str:
        rev = "" if self.revision == "main" else f"@{self.revision}"
        return f"{HF_REF_PREFIX}{self.repo_id}{rev}"


@dataclass(frozen=True, slots=True)
class HubFile:
    path: str  # inside the repository
    size: int
    oid: str  # the LFS sha256 when stored in LFS, else the git blob id: the cache validator


@dataclass(frozen=True, slots=True)
class HubEntry:
    """One model (or projector) of a repository: a file or a whole split set."""

    name: str  # the quant label (`Q4_K_M`, `UD-Q4_K_XL`), or the file's stem when it has none
    files: tuple[HubFile, ...]  # shards in order
    missing: tuple[str, ...] = ()  # shards of the split set the listing lacks
    mmproj: str | None = None  # path of the projector paired with it (models only)

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def first(self) -> str:
        return self.files[0].path


@dataclass(frozen=True, slots=True)
class HubListing:
    ref: HubRef
    endpoint: str
    models: tuple[HubEntry, ...]
    mmproj: tuple[HubEntry, ...]
    ignored: int  # files that are not GGUF

    def url(self, path: str) -> str:
        return hf_resolve_url(self.ref.repo_id, path, self.ref.revision, self.endpoint)

    def tag_is_unique(self, entry: HubEntry) -> bool:
        """llama-server's `-hf ORG/REPO:TAG` picks the file whose name holds TAG: only a tag no other model shares."""
        tag = quant_label(entry.first)
        if tag is None:
            return False
        holds = re.compile(rf"(?<![A-Z0-9]){re.escape(tag)}(?![A-Z0-9])")
        return sum(1 for e in self.models if holds.search(e.first.upper())) == 1

    def model_arg(self, entry: HubEntry) -> str:
        """What a command gets for this model: `hf.co/ORG/REPO:TAG` (`-hf`) when llama-server can find it by its
        tag on the main revision, else its resolve URL (`-mu`)."""
        if self.ref.revision == "main" and self.tag_is_unique(entry):
            return f"{HF_REF_PREFIX}{self.ref.repo_id}:{quant_label(entry.first)}"
        return self.url(entry.first)

    def find(self, quant: str | None = None, file: str | None = None) -> HubEntry:
        """The entry of this name (its quant tag, case-insensitive) or holding this file."""
        for e in self.models + self.mmproj:
            if file is not None and any(f.path == file for f in e.files):
                return e
            if quant is not None and file is None and e.name.upper() == quant.upper():
                return e
        what = f"no file {file!r}" if file is not None else f"no quant {quant!r}"
        have = ", ".join(e.name for e in self.models) or "no GGUF files"
        raise HubError(f"{what} in {self.ref.repo_id} (it has: {have})", None, self.ref.spelling)


def quant_label(path: str) -> str | None:
    """The quant tag in a GGUF file name (`Qwen3-8B-UD-Q4_K_XL-00001-of-00002.gguf` -> `UD-Q4_K_XL`), upper case."""
    name = path.rsplit("/", 1)[-1]
    m = SPLIT_NAME_RE.match(name)
    stem = m.group("prefix") if m else re.sub(r"\.gguf$", "", name, flags=re.IGNORECASE)
    found = _QUANT_RE.findall(stem)
    if not found and "/" in path:  # split sets often live in a folder named after the quant
        found = _QUANT_RE.findall(path.rsplit("/", 2)[-2])
    return found[-1].upper() if found else None


def _split_url_path(path: str) -> tuple[str, str, str | None] | None:
    """ORG/REPO[/tree/REV | /resolve/REV/FILE | /blob/REV/FILE] -> (repo, rev, file)."""
    parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
    if len(parts) < 2:
        return None
    repo = f"{parts[0]}/{parts[1]}"
    if len(parts) == 2:
        return repo, "main", None
    if parts[2] == "tree" and len(parts) >= 4:
        return repo, "/".join(parts[3:]), None
    if parts[2] in ("resolve", "blob") and len(parts) >= 5:
        return repo, parts[3], "/".join(parts[4:])
    return None


def parse_hub_ref(spelling: str, endpoint: str | None = None) -> HubRef | None:
    """The repository (and model) a spelling names, or None when it does not name one (a local path, another URL)."""
    s = spelling.strip()
    low = s.lower()
    e_host = (urllib.parse.urlsplit(hub_endpoint(endpoint)).hostname or "").lower()
    if low.startswith(("http://", "https://")):
        u = urllib.parse.urlsplit(s)
        if (u.hostname or "").lower() not in _HUB_HOSTS | {e_host}:
            return None
        got = _split_url_path(u.path)
        if got is None:
            return None
        repo, rev, file = got
        return HubRef(repo, rev, quant_label(file) if file else None, file) if _REPO_RE.match(repo) else None
    for host in sorted(_HUB_HOSTS | {e_host}, key=len, reverse=True):
        if host and low.startswith(host + "/"):
            s = s[len(host) + 1 :]
            break
    m = _REPO_RE.match(s)
    if m is None:
        return None
    return HubRef(m.group("repo"), m.group("rev") or "main", m.group("quant"))


def hf_arg(model_path: str) -> str | None:
    """llama-server's `-hf` value for a model argument spelled `hf.co/ORG/REPO:TAG`, else None."""
    if not model_path.startswith(HF_REF_PREFIX):
        return None
    m = _REPO_RE.match(model_path[len(HF_REF_PREFIX) :])
    if m is None or m.group("rev") or not m.group("quant"):
        return None
    return f"{m.group('repo')}:{m.group('quant')}"


# -- listing -----------------------------------------------------------------------------------------------------


def _next_link(link: str) -> str | None:
    for part in link.split(","):
        m = re.match(r'\s*<([^>]+)>\s*;\s*rel="?next"?', part)
        if m:
            return m.group(1)
    return None


def _files_of(page: object, source: str) -> list[HubFile]:
    if not isinstance(page, list):
        raise HubError("the Hub's tree listing is not a list", None, source)
    out: list[HubFile] = []
    for item in page:
        if not isinstance(item, dict) or item.get("type") != "file":
            continue
        path, size, oid = item.get("path"), item.get("size"), item.get("oid")
        lfs = item.get("lfs")
        if isinstance(lfs, dict):
            size = lfs.get("size", size)
            oid = lfs.get("oid", oid)
        if not isinstance(path, str) or not isinstance(oid, str) or type(size) is not int or size < 0:
            raise HubError(f"the Hub's tree listing has a malformed entry ({ascii(item)[:80]})", None, source)
        if not (_is_text(path) and _is_text(oid)):
            continue  # a lone surrogate or a control character: no file on the Hub is named so, none is asked for
        out.append(HubFile(path, size, oid))
    return out


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _is_text(s: str) -> bool:
    """Printable text that encodes to UTF-8 (a path or id that can be put in a URL and shown)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return _CONTROL.search(s) is None


def _list_problem(status: int, has_token: bool) -> str:
    if status == 401:
        return "HTTP 401: a private or gated repository" + (
            "" if has_token else " (pass a token: --token or HF_TOKEN)"
        )
    if status == 403:
        return "HTTP 403: access denied (accept the repository's licence on the Hub)"
    if status == 404:
        return "HTTP 404: no such repository or revision"
    return f"HTTP {status} from the Hub's tree listing"


def fetch_tree(ref: HubRef, endpoint: str, token: str | None) -> list[HubFile]:
    """Every file of the repository at its revision (all pages)."""
    q = urllib.parse.quote
    url: str | None = f"{endpoint}/api/models/{q(ref.repo_id)}/tree/{q(ref.revision, safe='')}?recursive=true"
    deadline = Deadline(LIST_DEADLINE_S)
    files: list[HubFile] = []
    for _ in range(MAX_PAGES):
        if url is None:
            return files
        ans = http_get(url, token=token, endpoint=endpoint, deadline=deadline, accept=(200,))
        if ans.status != 200:
            raise HubError(_list_problem(ans.status, token is not None), None, ref.spelling)
        try:
            page = loads_json(ans.body)
        except ValueError:  # not JSON, not UTF-8, or brackets nested thousands deep
            raise HubError("the Hub's tree listing is not JSON", None, ref.spelling) from None
        files.extend(_files_of(page, ref.spelling))
        nxt = _next_link(ans.headers.get("link", ""))
        url = urllib.parse.urljoin(url, nxt) if nxt else None
    raise HubError(f"the tree listing has more than {MAX_PAGES} pages", None, ref.spelling)


def _is_mmproj_name(path: str) -> bool:
    return "mmproj" in path.rsplit("/", 1)[-1].lower()


def group_files(files: Sequence[HubFile]) -> tuple[list[HubEntry], list[HubEntry], int]:
    """(models, projectors, non-GGUF count): split sets as one entry, in listing order of their first file."""
    singles: list[HubEntry] = []
    sets: dict[tuple[str, str, int], dict[int, HubFile]] = {}
    ignored = 0
    for f in files:
        if not f.path.lower().endswith(".gguf"):
            ignored += 1
            continue
        folder, _, name = f.path.rpartition("/")
        split = parse_split_name(name)
        if split is not None and split.problem:
            ignored += 1
        elif split is not None:
            sets.setdefault((folder, split.prefix, split.count), {})[split.no] = f
        else:
            singles.append(HubEntry(quant_label(f.path) or _stem(f.path), (f,)))
    for (folder, prefix, count), shards in sets.items():
        present = tuple(shards[i] for i in sorted(shards))
        missing: list[str] = []
        for i in range(1, count + 1):
            if len(missing) == 3:
                break
            if i not in shards:
                missing.append(f"{folder}/{prefix}-{i:05d}-of-{count:05d}.gguf".lstrip("/"))
        first = present[0].path
        singles.append(HubEntry(quant_label(first) or _stem(first), present, tuple(missing)))
    models = [e for e in singles if not _is_mmproj_name(e.first)]
    projectors = [e for e in singles if _is_mmproj_name(e.first)]
    return models, projectors, ignored


def _stem(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    m = SPLIT_NAME_RE.match(name)
    return m.group("prefix") if m else re.sub(r"\.gguf$", "", name, flags=re.IGNORECASE)


def projector_pairing(projectors: Sequence[HubEntry]) -> Callable[[HubEntry], str | None]:
    """The projector for each model: those in its own folder first, else the repository's root; best name match
    (`ProjectorIndex`: built once, so a listing of thousands of models and projectors is paired in O(n log n))."""
    by_folder: dict[str, list[tuple[str, str]]] = {}
    for p in projectors:
        folder, _, name = p.first.rpartition("/")
        by_folder.setdefault(folder, []).append((name, p.first))
    indexes = {folder: ProjectorIndex(items) for folder, items in by_folder.items()}

    def pair(model: HubEntry) -> str | None:
        folder, _, name = model.first.rpartition("/")
        for where in (folder, ""):
            index = indexes.get(where)
            if index is not None:
                return index.best(name)
        return None

    return pair


_LISTINGS: dict[tuple[str, str, str], tuple[float, HubListing]] = {}
_LISTINGS_LOCK = threading.Lock()


def list_repo(
    ref: HubRef, token: str | None = None, endpoint: str | None = None, *, fresh: bool = False
) -> HubListing:
    """The repository's GGUF models and projectors (kept `LISTING_TTL_S` in this process unless `fresh`)."""
    ep = hub_endpoint(endpoint)
    key = (ep, ref.repo_id, ref.revision)
    now = time.monotonic()
    with _LISTINGS_LOCK:
        hit = _LISTINGS.get(key)
    if hit is not None and not fresh and now - hit[0] < LISTING_TTL_S:
        return hit[1]
    models, projectors, ignored = group_files(fetch_tree(ref, ep, token))
    pair = projector_pairing(projectors)
    paired = tuple(HubEntry(m.name, m.files, m.missing, pair(m)) for m in models)
    listing = HubListing(HubRef(ref.repo_id, ref.revision), ep, paired, tuple(projectors), ignored)
    with _LISTINGS_LOCK:
        _LISTINGS[key] = (now, listing)
    return listing


def forget_listings() -> None:
    """Drop the listings kept in this process."""
    with _LISTINGS_LOCK:
        _LISTINGS.clear()
