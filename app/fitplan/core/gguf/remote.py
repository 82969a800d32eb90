"""Read GGUF headers over HTTP with Range requests (urllib only), never downloading tensor data.

The first request asks for `FIRST_CHUNK_REMOTE` bytes; each further one fetches only the missing part of a prefix
that doubles, so a header costs about log2(header size / 256 KiB) requests. Hugging Face `resolve/` URLs work, with an
optional bearer token (sent to the first host only: the CDN the Hub redirects to gets a pre-signed URL). A server that
ignores Range (200 with the whole body) is refused without reading the body.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection

from fitplan.core.base.errors import GGUFError, MissingShardError
from fitplan.core.gguf.header import DEFAULT_ARRAY_LIMIT, GGUFHeader, ModelFiles
from fitplan.core.gguf.reader import check_split_set, parse_header, split_shard_names

__all__ = [
    "FIRST_CHUNK_REMOTE",
    "HttpRangeSource",
    "RemoteHTTPError",
    "hf_resolve_url",
    "open_remote_model",
    "read_remote_header",
    "split_shard_urls",
]

FIRST_CHUNK_REMOTE = 256 * 1024
USER_AGENT = "fitplan (GGUF header reader)"
_CONTENT_RANGE_RE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)


class RemoteHTTPError(GGUFError):
    """The server answered with an HTTP error status."""

    def __init__(self, status: int, problem: str, offset: int | None, source: str) -> None:
        self.status = status
        super().__init__(problem, offset, source)


class HttpRangeSource:
    """A remote file read by byte ranges."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            raise GGUFError(f"unsupported URL scheme {scheme!r} (http or https expected)", None, url)
        self.url = url
        self.token = token
        self.timeout = timeout
        self._size: int | None = None
        self.requests = 0  # how many range requests were made

    @property
    def name(self) -> str:
        return self.url

    @property
    def size(self) -> int | None:
        return self._size

    @property
    def first_chunk(self) -> int:
        return FIRST_CHUNK_REMOTE

    @property
    def growth(self) -> int:
        return 2  # each request fetches only what the doubled prefix lacks

    def read(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        if self._size is not None and offset >= self._size:
            return b""
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={offset}-{offset + length - 1}"})
        req.add_header("User-Agent", USER_AGENT)
        if self.token:
            # unredirected: not forwarded to the host a redirect points at
            req.add_unredirected_header("Authorization", f"Bearer {self.token}")
        self.requests += 1
        try:
            resp = urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            e.close()
            if e.code == 416:
                return b""
            raise RemoteHTTPError(
                e.code, _http_problem(e.code, self.token is not None), offset, self.url
            ) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise GGUFError(f"cannot reach the server: {reason}", offset, self.url) from None
        with resp:
            if resp.status != 206:
                # The whole file would follow: close without reading it.
                raise GGUFError(
                    f"the server ignored the byte-range request (HTTP {resp.status} instead of 206), "
                    "so the header cannot be read without downloading the whole file",
                    offset,
                    self.url,
                )
            cr = resp.headers.get("Content-Range", "")
            m = _CONTENT_RANGE_RE.match(cr)
            if m is None:
                raise GGUFError(f"bad Content-Range {cr!r} in a 206 answer", offset, self.url)
            start, last, total = int(m.group(1)), int(m.group(2)), m.group(3)
            if start != offset or last < start or last > offset + length - 1:
                raise GGUFError(
                    f"the server sent bytes {start}-{last}, asked for {offset}-{offset + length - 1}",
                    offset,
                    self.url,
                )
            if total != "*":
                self._size = int(total)
            want = last - start + 1
            try:
                data: bytes = resp.read(want)
            except OSError as e:
                raise GGUFError(f"connection failed while reading: {e}", offset, self.url) from None
        if len(data) != want:
            raise GGUFError(f"short read: {len(data)} of {want} bytes", offset, self.url)
        return data

    def probe(self) -> None:
        """Learn the file size (a 1-byte range request) before parsing, so counts are checked against it."""
        self.read(0, 1)


def is_url(source: str) -> bool:
    """True for an http(s) address (read remotely; llama-server takes it as `-mu`, not `-m`)."""
    return source.startswith(("http://", "https://"))


def _http_problem(code: int, has_token: bool) -> str:
    if code == 401:
        return "HTTP 401: authentication required" + ("" if has_token else " (pass a Hugging Face token)")
    if code == 403:
        return "HTTP 403: access denied (a gated repository: accept its licence on the Hub and use a token)"
    if code == 404:
        return "HTTP 404: no such file"
    return f"HTTP {code}"


def read_remote_header(
    url: str,
    token: str | None = None,
    *,
    keep_arrays: Collection[str] = (),
    array_limit: int = DEFAULT_ARRAY_LIMIT,
    timeout: float = 30.0,
) -> GGUFHeader:
    """The header of a GGUF file at `url`, read with HTTP Range requests that stop where the header ends."""
    src = HttpRangeSource(url, token, timeout=timeout)
    # The remote file is complete by definition (we never see a partial upload); size checks still apply.
    return parse_header(src, keep_arrays=keep_arrays, array_limit=array_limit, allow_incomplete=True)


HF_ENDPOINT = "https://huggingface.co"


def hf_resolve_url(repo_id: str, filename: str, revision: str = "main", endpoint: str = HF_ENDPOINT) -> str:
    """The Hugging Face download URL of a file in a model repository ("org/name", "sub/dir/model.gguf")."""
    q = urllib.parse.quote
    return f"{endpoint.rstrip('/')}/{q(repo_id)}/resolve/{q(revision, safe='')}/{q(filename)}"


def split_shard_urls(url: str, count: int | None = None) -> tuple[str, ...] | None:
    """All shard URLs of the split set `url` belongs to (the file name in the path decides), or None."""
    parts = urllib.parse.urlsplit(url)
    head, _, name = parts.path.rpartition("/")
    names = split_shard_names(urllib.parse.unquote(name), count)
    if names is None:
        return None
    return tuple(
        urllib.parse.urlunsplit(parts._replace(path=f"{head}/{urllib.parse.quote(n)}")) for n in names
    )


def open_remote_model(
    url: str,
    token: str | None = None,
    *,
    keep_arrays: Collection[str] = (),
    array_limit: int = DEFAULT_ARRAY_LIMIT,
    timeout: float = 30.0,
) -> ModelFiles:
    """Remote counterpart of `open_model`: any shard URL loads the whole split set (no projector pairing)."""

    def read(u: str) -> GGUFHeader:
        return read_remote_header(u, token, keep_arrays=keep_arrays, array_limit=array_limit, timeout=timeout)

    first = read(url)
    count = first.get_int("split.count", 0)
    if count <= 1:
        return ModelFiles(shards=(first,))
    urls = split_shard_urls(url, count)
    if urls is None:
        raise GGUFError(
            f"this file is one of {count} shards but its name does not follow the NAME-0000i-of-0000N.gguf pattern",
            None,
            url,
        )
    headers: list[GGUFHeader] = []
    missing: list[str] = []
    for u in urls:
        if u == url:
            headers.append(first)
            continue
        try:
            headers.append(read(u))
        except RemoteHTTPError as e:
            if e.status != 404:
                raise
            missing.append(u)
    if missing:
        raise MissingShardError(url, tuple(missing))
    shards = tuple(headers)
    check_split_set(shards)
    return ModelFiles(shards=shards)
