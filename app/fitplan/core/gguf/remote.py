"""Read GGUF headers over HTTP with Range requests (http.client only), never downloading tensor data.

The first request asks for `FIRST_CHUNK_REMOTE` bytes; each further one fetches only the missing part of a prefix
that doubles, so a header costs about log2(header size / 256 KiB) requests. A server that ignores Range (200 with the
whole body) is refused without reading the body.

What a stranger's server can do is bounded (docs/security.md):

* the token (`HF_TOKEN` or `--token`) goes only to the Hugging Face endpoint (`HF_ENDPOINT`, default
  https://huggingface.co), only over https (plain http only when that endpoint is this machine's loopback), and never
  to the host a redirect points at: the CDN the Hub redirects `resolve/` downloads to gets a pre-signed URL;
* one overall deadline per header read (`HEADER_DEADLINE_S`): a server that answers one byte a second is cut off
  when it passes, whatever the per-read timeout;
* at most `MAX_REQUESTS_PER_HEADER` requests per header, `MAX_REDIRECTS` redirects per request and
  `MAX_REMOTE_SHARDS` shards per split set (a first shard that declares `split.count` 65535 costs one request);
* malformed answers (a garbage status line, too many or too long header lines, broken chunking) are one-line
  `GGUFError`s, never http.client tracebacks.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fitplan.core.base.errors import GGUFError, MissingShardError
from fitplan.core.base.numbers import int_or_none
from fitplan.core.gguf.header import DEFAULT_ARRAY_LIMIT, GGUFHeader, ModelFiles
from fitplan.core.gguf.reader import check_split_set, parse_header, split_shard_names

if (
    TYPE_CHECKING
):  # http.client, ssl and urllib.request load with the first request, not with the command line
    import http.client

__all__ = [
    "DEFAULT_ENDPOINT",
    "FIRST_CHUNK_REMOTE",
    "HEADER_DEADLINE_S",
    "MAX_REMOTE_SHARDS",
    "Deadline",
    "HttpAnswer",
    "HttpRangeSource",
    "RemoteHTTPError",
    "hf_resolve_url",
    "http_get",
    "hub_endpoint",
    "hub_token",
    "is_url",
    "open_remote_model",
    "read_remote_header",
    "split_shard_urls",
    "token_allowed",
]

FIRST_CHUNK_REMOTE = 256 * 1024
USER_AGENT = "fitplan (GGUF header reader)"
DEFAULT_ENDPOINT = "https://huggingface.co"
ENDPOINT_ENV = "HF_ENDPOINT"
TOKEN_ENV = "HF_TOKEN"
#: Seconds one header read may take in all (every request, redirect and byte of it).
HEADER_DEADLINE_S = 60.0
MAX_REDIRECTS = 5
#: A header needs log2(size / 256 KiB) + 1 requests: 24 cover a 2 TiB header.
MAX_REQUESTS_PER_HEADER = 24
#: The largest split set read remotely (llama.cpp's gguf-split writes at most 99999; real ones have under 100).
MAX_REMOTE_SHARDS = 256
#: After this many missing shards the others are not asked for.
MAX_MISSING_REPORTED = 3
_CONTENT_RANGE_RE = re.compile(r"^\s*bytes\s+([0-9]+)-([0-9]+)/([0-9]+|\*)\s*$", re.IGNORECASE)
#: No file fitplan reads remotely is larger (1 PiB): a larger offset or size in a header is a bad answer.
MAX_REMOTE_BYTES = 1 << 50
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_KEPT_HEADERS = (
    "content-range", "content-length", "content-type", "etag", "x-linked-etag", "x-linked-size", "link",
)  # fmt: skip


class RemoteHTTPError(GGUFError):
    """The server answered with an HTTP error status."""

    def __init__(self, status: int, problem: str, offset: int | None, source: str) -> None:
        self.status = status
        super().__init__(problem, offset, source)


def hub_endpoint(endpoint: str | None = None) -> str:
    """The Hugging Face endpoint: `endpoint`, else `$HF_ENDPOINT`, else https://huggingface.co (no trailing /)."""
    return (endpoint or os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT).rstrip("/")


def hub_token(token: str | None = None) -> str | None:
    """The token to use: `token` (`--token`), else `$HF_TOKEN`, else None."""
    return token or os.environ.get(TOKEN_ENV) or None


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_allowed(url: str, endpoint: str | None = None) -> bool:
    """May the token be sent with a request for `url`? Only to the Hub endpoint itself, and only over https (or to a
    loopback endpoint, where nothing crosses a network)."""
    scheme, host, port = _origin(url)
    e_scheme, e_host, e_port = _origin(hub_endpoint(endpoint))
    if (scheme, host, port) != (e_scheme, e_host, e_port) or port is None:
        return False
    return scheme == "https" or (scheme == "http" and _is_loopback(host))


class Deadline:
    """One overall time limit shared by every request of one operation."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def expired(self) -> bool:
        return self.left() <= 0


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """One answer after redirects: status, the few headers fitplan reads (lower-case names), body, final URL."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str


def _clean(text: object, limit: int = 120) -> str:
    """Server text for a one-line message: printable ASCII only, bounded."""
    s = ascii(str(text))[1:-1]
    return s if len(s) <= limit else s[:limit] + "..."


def _proxy_for(scheme: str, host: str) -> tuple[str, int] | None:
    if _is_loopback(host):
        return None
    import urllib.request

    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if not p.hostname:
        return None
    return p.hostname, p.port or 8080


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    """A connection for `url` (through the environment's proxy, if any) and the request target to send."""
    import http.client
    import ssl

    parts = urllib.parse.urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    port = parts.port
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    proxy = _proxy_for(scheme, host)
    if scheme == "https":
        ctx = ssl.create_default_context()
        if proxy is None:
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx), target
        conn = http.client.HTTPSConnection(proxy[0], proxy[1], timeout=timeout, context=ctx)
        conn.set_tunnel(host, port)
        return conn, target
    if proxy is None:
        return http.client.HTTPConnection(host, port, timeout=timeout), target
    return http.client.HTTPConnection(proxy[0], proxy[1], timeout=timeout), url


def _cut_off(conn: http.client.HTTPConnection, fired: threading.Event) -> None:
    """The deadline passed: shut the socket so that any blocked read returns at once."""
    import socket  # with the first connection: a local file's plan never opens one

    fired.set()
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _read_body(resp: http.client.HTTPResponse, max_body: int, url: str) -> bytes:
    declared = int_or_none(resp.getheader("Content-Length") or "", 0, MAX_REMOTE_BYTES)
    if declared is not None and declared > max_body:
        raise GGUFError(f"the answer is {declared} bytes, more than the {max_body} expected", None, url)
    chunks: list[bytes] = []
    n = 0
    while True:
        data = resp.read(min(65536, max_body + 1 - n))
        if not data:
            return b"".join(chunks)
        chunks.append(data)
        n += len(data)
        if n > max_body:
            raise GGUFError(f"the answer is longer than the {max_body} bytes expected", None, url)


def _one_request(
    url: str,
    headers: Mapping[str, str],
    token: str | None,
    deadline: Deadline,
    timeout: float,
    accept: Collection[int],
    max_body: int,
) -> HttpAnswer:
    """One GET without following redirects; the body is read only for a status in `accept`."""
    conn, target = _connection(url, max(0.001, min(timeout, deadline.left())))
    fired = threading.Event()
    watchdog = threading.Timer(max(0.0, deadline.left()), _cut_off, (conn, fired))
    watchdog.daemon = True
    watchdog.start()
    resp: http.client.HTTPResponse | None = None
    try:
        conn.putrequest("GET", target, skip_accept_encoding=True)
        conn.putheader("User-Agent", USER_AGENT)
        for k, v in headers.items():
            conn.putheader(k, v)
        if token:
            conn.putheader("Authorization", f"Bearer {token}")
        conn.endheaders()
        resp = conn.getresponse()
        kept = {
            k: resp.getheader(k, "") for k in (*_KEPT_HEADERS, "location") if resp.getheader(k) is not None
        }
        body = _read_body(resp, max_body, url) if resp.status in accept else b""
        if fired.is_set():  # what arrived before the cut is not the answer
            raise TimeoutError("deadline")
        return HttpAnswer(resp.status, kept, body, url)
    finally:
        watchdog.cancel()
        if resp is not None:
            resp.close()
        conn.close()


def _transport_error(exc: BaseException, url: str, deadline: Deadline) -> GGUFError:
    import http.client
    import socket
    import ssl

    if deadline.expired():
        return GGUFError(f"the server took longer than {deadline.seconds:g} s in all; gave up", None, url)
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return GGUFError("the server did not answer in time", None, url)
    if isinstance(
        exc, ssl.SSLError
    ):  # a certificate that does not verify is also a ValueError: not an answer
        reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or exc
        return GGUFError(f"the secure connection failed ({_clean(reason)})", None, url)
    if isinstance(exc, http.client.HTTPException | ValueError):
        return GGUFError(f"malformed answer from the server ({type(exc).__name__}: {_clean(exc)})", None, url)
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
    return GGUFError(f"cannot reach the server: {_clean(reason)}", None, url)


def http_get(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    deadline: Deadline | None = None,
    timeout: float = 30.0,
    accept: Collection[int] = (200, 206),
    max_body: int = 16 << 20,
) -> HttpAnswer:
    """GET `url`, following up to `MAX_REDIRECTS` redirects. The token goes with each hop that `token_allowed`;
    every failure of the transport or of the server's answer is a one-line `GGUFError`."""
    import http.client

    dl = deadline if deadline is not None else Deadline(HEADER_DEADLINE_S)
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        scheme = urllib.parse.urlsplit(current).scheme.lower()
        if scheme not in ("http", "https"):
            raise GGUFError(f"unsupported URL scheme {scheme!r} (http or https expected)", None, current)
        if dl.expired():
            raise GGUFError(f"the server took longer than {dl.seconds:g} s in all; gave up", None, url)
        send = token if token and token_allowed(current, endpoint) else None
        try:
            ans = _one_request(current, headers or {}, send, dl, timeout, accept, max_body)
        except GGUFError:
            raise
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise _transport_error(exc, current, dl) from None
        location = ans.headers.get("location")
        if ans.status not in _REDIRECTS or not location:
            return ans
        current = urllib.parse.urljoin(current, location.strip())
    raise GGUFError(f"more than {MAX_REDIRECTS} redirects", None, url)


class HttpRangeSource:
    """A remote file read by byte ranges, within one `Deadline` and at most `MAX_REQUESTS_PER_HEADER` requests.

    After a redirect the final URL is asked directly (the pre-signed CDN address; no token goes there)."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        endpoint: str | None = None,
        deadline: Deadline | None = None,
    ) -> None:
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            raise GGUFError(f"unsupported URL scheme {scheme!r} (http or https expected)", None, url)
        self.url = url
        self.token = token
        self.endpoint = endpoint
        self.timeout = timeout
        self.deadline = deadline if deadline is not None else Deadline(HEADER_DEADLINE_S)
        self._target = url
        self._size: int | None = None
        self.etag: str | None = None  # the file's ETag (X-Linked-Etag on the Hub), from the first answer
        self.requests = 0  # how many range requests were made (redirect hops not counted)
        self.bytes_received = 0

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
        if length <= 0 or (self._size is not None and offset >= self._size):
            return b""
        if self.requests >= MAX_REQUESTS_PER_HEADER:
            raise GGUFError(
                f"the header needs more than {MAX_REQUESTS_PER_HEADER} requests", offset, self.url
            )
        self.requests += 1
        last = offset + length - 1
        ans = http_get(
            self._target,
            headers={"Range": f"bytes={offset}-{last}"},
            token=self.token,  # http_get sends it only to the Hub endpoint (never to the CDN)
            endpoint=self.endpoint,
            deadline=self.deadline,
            timeout=self.timeout,
            accept=(206,),
            max_body=length,
        )
        return self._take(ans, offset, length)

    def _take(self, ans: HttpAnswer, offset: int, length: int) -> bytes:
        if ans.status == 416:
            return b""
        if ans.status >= 400:
            raise RemoteHTTPError(
                ans.status, _http_problem(ans.status, self.token is not None), offset, self.url
            )
        if ans.status != 206:
            # The whole file would follow: it was never read, the connection is closed.
            raise GGUFError(
                f"the server ignored the byte-range request (HTTP {ans.status} instead of 206), "
                "so the header cannot be read without downloading the whole file",
                offset,
                self.url,
            )
        self._target = ans.url
        cr = ans.headers.get("content-range", "")
        m = _CONTENT_RANGE_RE.match(cr)
        if m is None:
            raise GGUFError(f"bad Content-Range {_clean(cr)!r} in a 206 answer", offset, self.url)
        start = int_or_none(m.group(1), 0, MAX_REMOTE_BYTES)
        last = int_or_none(m.group(2), 0, MAX_REMOTE_BYTES)
        total = m.group(3)
        size = None if total == "*" else int_or_none(total, 1, MAX_REMOTE_BYTES)
        if start is None or last is None or (total != "*" and size is None):
            raise GGUFError(
                f"bad Content-Range {_clean(cr)[:60]!r} in a 206 answer (numbers past {MAX_REMOTE_BYTES} bytes)",
                offset,
                self.url,
            )
        if start != offset or last < start or last > offset + length - 1:
            raise GGUFError(
                f"the server sent bytes {start}-{last}, asked for {offset}-{offset + length - 1}",
                offset,
                self.url,
            )
        if size is not None:
            self._size = size
        if self.etag is None:
            self.etag = ans.headers.get("x-linked-etag") or ans.headers.get("etag") or None
        want = last - start + 1
        if len(ans.body) != want:
            raise GGUFError(f"short read: {len(ans.body)} of {want} bytes", offset, self.url)
        self.bytes_received += want
        return ans.body

    def probe(self) -> None:
        """Learn the file size and ETag (a 1-byte range request) without reading the header."""
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
    endpoint: str | None = None,
    deadline_s: float = HEADER_DEADLINE_S,
) -> GGUFHeader:
    """The header of a GGUF file at `url`, read with HTTP Range requests that stop where the header ends."""
    return read_remote_source(
        HttpRangeSource(url, token, timeout=timeout, endpoint=endpoint, deadline=Deadline(deadline_s)),
        keep_arrays=keep_arrays,
        array_limit=array_limit,
    )


def read_remote_source(
    src: HttpRangeSource, *, keep_arrays: Collection[str] = (), array_limit: int = DEFAULT_ARRAY_LIMIT
) -> GGUFHeader:
    """Parse the header behind `src` (its `etag`, `size` and counters are filled as a side effect)."""
    # The remote file is complete by definition (we never see a partial upload); size checks still apply.
    return parse_header(src, keep_arrays=keep_arrays, array_limit=array_limit, allow_incomplete=True)


def hf_resolve_url(repo_id: str, filename: str, revision: str = "main", endpoint: str | None = None) -> str:
    """The Hugging Face download URL of a file in a model repository ("org/name", "sub/dir/model.gguf")."""
    q = urllib.parse.quote
    return f"{hub_endpoint(endpoint)}/{q(repo_id)}/resolve/{q(revision, safe='')}/{q(filename)}"


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


def check_shard_count(count: int, source: str) -> None:
    """Refuse split sets larger than `MAX_REMOTE_SHARDS` before asking for any other shard."""
    if count > MAX_REMOTE_SHARDS:
        raise GGUFError(
            f"split.count is {count}: more than {MAX_REMOTE_SHARDS} shards are not read remotely",
            None,
            source,
        )


def open_remote_model(
    url: str,
    token: str | None = None,
    *,
    keep_arrays: Collection[str] = (),
    array_limit: int = DEFAULT_ARRAY_LIMIT,
    timeout: float = 30.0,
    endpoint: str | None = None,
    reader: Callable[[str], GGUFHeader] | None = None,
) -> ModelFiles:
    """Remote counterpart of `open_model`: any shard URL loads the whole split set (no projector pairing).

    `reader` reads one header (default `read_remote_header` with these options; a cache goes there)."""

    def default_read(u: str) -> GGUFHeader:
        return read_remote_header(
            u, token, keep_arrays=keep_arrays, array_limit=array_limit, timeout=timeout, endpoint=endpoint
        )

    read = reader if reader is not None else default_read
    first = read(url)
    count = first.get_int("split.count", 0)
    if count <= 1:
        return ModelFiles(shards=(first,))
    check_shard_count(count, url)
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
            if len(missing) >= MAX_MISSING_REPORTED:
                break
    if missing:
        raise MissingShardError(url, tuple(missing))
    shards = tuple(headers)
    check_split_set(shards)
    return ModelFiles(shards=shards)
