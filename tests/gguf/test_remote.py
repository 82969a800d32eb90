"""Remote headers over HTTP Range requests, against loopback servers (one honours Range, one ignores it)."""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from fitplan.core.base.errors import GGUFError, MissingShardError
from fitplan.core.gguf.reader import read_header
from fitplan.core.gguf.remote import (
    FIRST_CHUNK_REMOTE,
    HttpRangeSource,
    hf_resolve_url,
    open_remote_model,
    read_remote_header,
    split_shard_urls,
    token_allowed,
)
from gguf import GGUFValueType, GGUFWriter


@dataclass
class Served:
    files: dict[str, bytes] = field(default_factory=dict)
    honour_range: bool = True
    private_prefix: str = "/private/"
    token: str = "hf_secret"
    log: list[tuple[str, str | None, str | None]] = field(default_factory=list)  # path, Range, Authorization
    bytes_sent: int = 0


def make_handler(state: Served) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            path = self.path
            state.log.append((path, self.headers.get("Range"), self.headers.get("Authorization")))
            if path.startswith("/redirect/"):
                self.send_response(302)
                self.send_header("Location", "/cdn/" + path.removeprefix("/redirect/"))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if (
                path.startswith(state.private_prefix)
                and self.headers.get("Authorization") != f"Bearer {state.token}"
            ):
                self.send_error(401)
                return
            key = "/" + path.split("/")[-1]
            body = state.files.get(key)
            if body is None:
                self.send_error(404)
                return
            rng = self.headers.get("Range")
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", rng or "")
            try:
                if state.honour_range and m:
                    start, end = int(m.group(1)), min(int(m.group(2)), len(body) - 1)
                    if start >= len(body):
                        self.send_error(416)
                        return
                    chunk = body[start : end + 1]
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
                    self.send_header("Content-Length", str(len(chunk)))
                    self.end_headers()
                    self.wfile.write(chunk)
                    state.bytes_sent += len(chunk)
                else:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    for i in range(0, len(body), 65536):
                        self.wfile.write(body[i : i + 65536])
                        state.bytes_sent += min(65536, len(body) - i)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler


@pytest.fixture
def server() -> Iterator[tuple[str, Served]]:
    state = Served()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(5)


def gguf_bytes(
    tmp_path: Path, name: str, n_tokens: int = 100, data_mib: int = 0, kv: dict[str, int] | None = None
) -> bytes:
    p = tmp_path / name
    w = GGUFWriter(str(p), "llama")
    w.add_uint32("llama.block_count", 3)
    for k, v in (kv or {}).items():
        w.add_key_value(k, v, GGUFValueType.UINT16 if k != "split.tensors.count" else GGUFValueType.INT32)
    w.add_array("tokenizer.ggml.tokens", [f"token-{i:06d}" for i in range(n_tokens)])
    tensor = f"w.{kv['split.no']}" if kv and "split.no" in kv else "w"  # shards hold different tensors
    w.add_tensor(tensor, np.zeros((max(1, data_mib * 1024 * 256), 1), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return p.read_bytes()


def test_remote_header_equals_local(tmp_path: Path, server: tuple[str, Served]) -> None:
    base, state = server
    body = gguf_bytes(tmp_path, "m.gguf", n_tokens=60_000, data_mib=4)
    state.files["/m.gguf"] = body
    remote = read_remote_header(f"{base}/org/repo/resolve/main/m.gguf")
    local = read_header(tmp_path / "m.gguf")
    assert dict(remote.metadata) == dict(local.metadata)
    assert remote.tensors == local.tensors
    assert remote.data_offset == local.data_offset and remote.file_size == len(body)
    # 60,000 tokens of 12 chars take 60,000 * (8 + 12) = 1.2 MB: the prefix doubles 256K -> 512K -> 1M -> 2M
    assert local.data_offset > 1024 * 1024
    assert [r for _, r, _ in state.log] == [
        f"bytes=0-{FIRST_CHUNK_REMOTE - 1}",
        f"bytes={FIRST_CHUNK_REMOTE}-{2 * FIRST_CHUNK_REMOTE - 1}",
        f"bytes={2 * FIRST_CHUNK_REMOTE}-{4 * FIRST_CHUNK_REMOTE - 1}",
        f"bytes={4 * FIRST_CHUNK_REMOTE}-{8 * FIRST_CHUNK_REMOTE - 1}",
    ]
    assert state.bytes_sent == 8 * FIRST_CHUNK_REMOTE < len(body)  # never the 4 MiB of tensor data


def test_small_header_is_one_request(tmp_path: Path, server: tuple[str, Served]) -> None:
    base, state = server
    state.files["/s.gguf"] = gguf_bytes(tmp_path, "s.gguf", data_mib=2)
    h = read_remote_header(f"{base}/s.gguf")
    assert h.get_int("llama.block_count") == 3 and len(state.log) == 1
    assert h.header_bytes_read == FIRST_CHUNK_REMOTE


def test_server_ignoring_range_is_refused_without_reading_the_body(
    tmp_path: Path, server: tuple[str, Served], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, state = server
    state.honour_range = False
    state.files["/big.gguf"] = gguf_bytes(tmp_path, "big.gguf", data_mib=8)
    reads: list[object] = []
    real_read = http.client.HTTPResponse.read

    def spy(self: http.client.HTTPResponse, amt: int | None = None) -> bytes:
        reads.append(amt)
        return real_read(self, amt)

    monkeypatch.setattr(http.client.HTTPResponse, "read", spy)
    with pytest.raises(GGUFError, match=r"ignored the byte-range request \(HTTP 200 instead of 206\)"):
        read_remote_header(f"{base}/big.gguf")
    assert reads == []  # the body was never read, the connection closed


def test_token_sent_to_the_hub_endpoint_only(
    tmp_path: Path, server: tuple[str, Served], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, state = server
    state.files["/g.gguf"] = gguf_bytes(tmp_path, "g.gguf")
    # not the Hub endpoint (the default is https://huggingface.co): the token stays home, the server says 401
    with pytest.raises(GGUFError, match="HTTP 401: authentication required"):
        read_remote_header(f"{base}/private/g.gguf", token="hf_secret")
    assert state.log[-1][2] is None
    monkeypatch.setenv("HF_ENDPOINT", base)  # a loopback endpoint: plain http never leaves the machine
    h = read_remote_header(f"{base}/private/g.gguf", token="hf_secret")
    assert h.get_int("llama.block_count") == 3
    assert state.log[-1][2] == "Bearer hf_secret"


def test_token_rule() -> None:
    assert token_allowed("https://huggingface.co/o/r/resolve/main/m.gguf")
    assert not token_allowed("http://huggingface.co/o/r/resolve/main/m.gguf")  # plain http: never
    assert not token_allowed("https://huggingface.co.evil.example/o/r")
    assert not token_allowed("https://cdn-lfs.hf.co/blob?sig=x")  # the CDN a resolve/ redirect points at
    assert not token_allowed("https://huggingface.co:8443/o/r")
    assert token_allowed("https://hf-mirror.example/o/r", "https://hf-mirror.example/")
    assert not token_allowed("http://hf-mirror.example/o/r", "http://hf-mirror.example")  # http, not loopback
    assert token_allowed("http://127.0.0.1:8080/o/r", "http://127.0.0.1:8080")
    assert not token_allowed("http://127.0.0.1:8081/o/r", "http://127.0.0.1:8080")


def test_http_errors(server: tuple[str, Served]) -> None:
    base, _ = server
    with pytest.raises(GGUFError, match="HTTP 404: no such file") as e:
        read_remote_header(f"{base}/nope.gguf")
    assert e.value.source == f"{base}/nope.gguf"
    with pytest.raises(GGUFError, match="unsupported URL scheme 'ftp'"):
        HttpRangeSource("ftp://example.org/x.gguf")


def test_unreachable_server() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(GGUFError, match="cannot reach the server"):
        read_remote_header(f"http://127.0.0.1:{port}/x.gguf", timeout=5)


def test_not_gguf_remote(server: tuple[str, Served]) -> None:
    base, state = server
    state.files["/x.gguf"] = b"<html>not a model</html>"
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_remote_header(f"{base}/x.gguf")


def _split_set(tmp_path: Path, state: Served, n: int) -> list[str]:
    names = [f"Model-Q4_K_M-{i + 1:05d}-of-{n:05d}.gguf" for i in range(n)]
    for i, name in enumerate(names):
        kv = {"split.no": i, "split.count": n, "split.tensors.count": n}
        state.files["/" + name] = gguf_bytes(tmp_path, name, kv=kv)
    return names


def test_remote_split_set(tmp_path: Path, server: tuple[str, Served]) -> None:
    base, state = server
    names = _split_set(tmp_path, state, 3)
    mf = open_remote_model(f"{base}/repo/resolve/main/{names[1]}")
    assert [h.source for h in mf.shards] == [f"{base}/repo/resolve/main/{n}" for n in names]
    assert [h.get_int("split.no") for h in mf.shards] == [0, 1, 2]


def test_remote_split_set_missing_shard(tmp_path: Path, server: tuple[str, Served]) -> None:
    base, state = server
    names = _split_set(tmp_path, state, 3)
    del state.files["/" + names[2]]
    with pytest.raises(MissingShardError) as e:
        open_remote_model(f"{base}/r/{names[0]}")
    assert e.value.missing == (f"{base}/r/{names[2]}",)


def test_split_shard_urls() -> None:
    urls = split_shard_urls("https://huggingface.co/o/r/resolve/main/Q4/M-00002-of-00002.gguf?download=true")
    assert urls == (
        "https://huggingface.co/o/r/resolve/main/Q4/M-00001-of-00002.gguf?download=true",
        "https://huggingface.co/o/r/resolve/main/Q4/M-00002-of-00002.gguf?download=true",
    )
    assert split_shard_urls("https://x/y/model.gguf") is None


def test_hf_resolve_url() -> None:
    assert (
        hf_resolve_url("unsloth/Qwen3-8B-GGUF", "Q4_K_M/Qwen3-8B Q4_K_M.gguf")
        == "https://huggingface.co/unsloth/Qwen3-8B-GGUF/resolve/main/Q4_K_M/Qwen3-8B%20Q4_K_M.gguf"
    )
    assert hf_resolve_url("o/r", "m.gguf", revision="refs/pr/1").endswith("/o/r/resolve/refs%2Fpr%2F1/m.gguf")


# -- hostile servers (issue class "remote headers"): one-line errors, one deadline, bounded requests ---------------


@contextlib.contextmanager
def raw_server(answer: Callable[[socket.socket], None], connections: int = 2) -> Iterator[str]:
    """A loopback server that reads each request and lets `answer` write anything; stops by itself."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(10)
    port = srv.getsockname()[1]

    def loop() -> None:
        for _ in range(connections):
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                try:
                    conn.recv(65536)
                    answer(conn)
                except OSError:
                    pass

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{port}/m.gguf"
    finally:
        with contextlib.suppress(OSError):
            srv.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the serving thread
        srv.close()
        t.join(12)


def _send(data: bytes) -> Callable[[socket.socket], None]:
    return lambda conn: conn.sendall(data)


_OK_HEAD = b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/10\r\n"
HOSTILE = {
    "garbage status line": b"\x1b]0;owned\x07 NOT HTTP AT ALL\r\n\r\n",
    "more than 100 headers": _OK_HEAD + b"".join(b"X-%d: y\r\n" % i for i in range(150)) + b"\r\n",
    "a huge header line": _OK_HEAD + b"X-Big: " + b"a" * 70000 + b"\r\n\r\n",
    "broken chunking": _OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\nZZZ-not-hex\r\n",
    "chunk shorter than announced": _OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\nff\r\nabc",
    "body shorter than announced": _OK_HEAD + b"Content-Length: 10\r\n\r\nabc",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_malformed_answers_are_one_line_errors(case: str) -> None:
    with raw_server(_send(HOSTILE[case])) as url, pytest.raises(GGUFError) as e:
        read_remote_header(url, timeout=5)
    msg = str(e.value)
    assert "\n" not in msg and "\x1b" not in msg and len(msg) < 300, msg
    assert type(e.value.__cause__) is not http.client.HTTPException


def test_a_slow_server_is_given_up_on_at_the_deadline() -> None:
    def one_byte_a_tenth(conn: socket.socket) -> None:
        conn.sendall(_OK_HEAD)
        for _ in range(100):  # 10 s of headers, each byte well within the per-read timeout
            conn.sendall(b"X")
            time.sleep(0.1)

    t0 = time.monotonic()
    with (
        raw_server(one_byte_a_tenth, connections=1) as url,
        pytest.raises(GGUFError, match=r"longer than 1\.5 s"),
    ):
        read_remote_header(url, timeout=5, deadline_s=1.5)
    assert time.monotonic() - t0 < 5


def test_split_count_65535_costs_one_request(tmp_path: Path, server: tuple[str, Served]) -> None:
    base, state = server
    name = "Big-00001-of-65535.gguf"
    state.files["/" + name] = gguf_bytes(tmp_path, name, kv={"split.no": 0, "split.count": 65535})
    with pytest.raises(GGUFError, match=r"split\.count is 65535: more than 256 shards") as e:
        open_remote_model(f"{base}/{name}")
    assert len(state.log) == 1 and len(str(e.value)) < 300


def test_missing_shards_stop_after_a_few(tmp_path: Path, server: tuple[str, Served]) -> None:
    base, state = server
    name = "M-00001-of-00200.gguf"
    kv = {"split.no": 0, "split.count": 200, "split.tensors.count": 200}
    state.files["/" + name] = gguf_bytes(tmp_path, name, kv=kv)
    with pytest.raises(MissingShardError) as e:
        open_remote_model(f"{base}/{name}")
    assert len(e.value.missing) == 3 and len(state.log) == 4  # the first shard, then 3 missing ones


def test_a_certificate_that_does_not_verify_is_said_as_such(tmp_path: Path) -> None:
    # A TLS server with a self-signed certificate: the handshake fails verification (ssl's error is also a
    # ValueError); the message says the secure connection failed, not that the server's answer was malformed.
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a self-signed certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with contextlib.suppress(OSError, ssl.SSLError):
                ctx.wrap_socket(conn, server_side=True).close()
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with pytest.raises(GGUFError) as e:
            read_remote_header(f"https://127.0.0.1:{port}/x.gguf", timeout=10)
    finally:
        listener.close()
        t.join(10)
    assert "secure connection failed" in str(e.value)
    assert "certificate" in str(e.value)
    assert "malformed" not in str(e.value)
