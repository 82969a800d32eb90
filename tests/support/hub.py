"""A loopback imitation of the Hugging Face Hub for tests and bench/quants.py, and a test repository of quants.

Two servers: the *hub* answers the tree API (`/api/models/ORG/REPO/tree/REV?recursive=true`, paginated with
`Link: rel="next"`) and redirects `resolve/` downloads (302) to the *cdn*, which serves byte ranges of each file: its
header, then zeros up to the size the header declares (what a sparse copy of the real file holds). Private
repositories need the token on the hub; every request's Authorization is logged on both, and the bytes each sends.

`quant_repo(folder)` writes a repository of mixed quants and split sets from a header in tests/fixtures: the same
tensors, re-typed, with their sizes recomputed (`gguf.GGML_QUANT_SIZES`), as header-only files (fitplan.header_only).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from fitplan.core.gguf.header import GGUFArray, GGUFHeader, MetadataValue
from fitplan.core.gguf.reader import read_header
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, GGUFWriter
from support.models import SPARSE

Q = GGMLQuantizationType


@dataclass
class RepoFile:
    data: bytes  # the header (header-only file)
    size: int  # the size the server reports: header + the hole of tensor data

    @property
    def oid(self) -> str:
        return hashlib.sha256(self.data + str(self.size).encode()).hexdigest()


@dataclass
class HubState:
    repos: dict[str, dict[str, RepoFile]] = field(default_factory=dict)  # repo id -> path -> file
    private: set[str] = field(default_factory=set)
    token: str = "hf_secret"
    page_size: int = 1000
    honour_range: bool = True
    tree_body: bytes | None = None  # a tree API answer to send instead of the real one
    cdn_base: str = ""
    hub_log: list[tuple[str, str | None]] = field(default_factory=list)  # path, Authorization
    cdn_log: list[tuple[str, str | None, str | None]] = field(
        default_factory=list
    )  # path, Range, Authorization
    cdn_bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, repo: str, folder: Path) -> None:
        files: dict[str, RepoFile] = {}
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                rel = p.relative_to(folder).as_posix()
                data = p.read_bytes()
                size = len(data)
                if p.suffix == ".gguf":
                    size = read_header(p, allow_incomplete=True).declared_file_size
                files[rel] = RepoFile(data, size)
        self.repos[repo] = files

    def by_oid(self, oid: str) -> RepoFile | None:
        for files in self.repos.values():
            for f in files.values():
                if f.oid == oid:
                    return f
        return None


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)


def _hub_handler(state: HubState) -> type[BaseHTTPRequestHandler]:
    class Hub(_Quiet):
        def do_GET(self) -> None:
            auth = self.headers.get("Authorization")
            with state.lock:
                state.hub_log.append((self.path, auth))
            parts = urllib.parse.urlsplit(self.path)
            path = urllib.parse.unquote(parts.path)
            m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)", path)
            if m:
                return self.tree(m.group(1), urllib.parse.parse_qs(parts.query), auth)
            m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
            if m:
                return self.resolve(m.group(1), m.group(3), auth)
            return self.reply(404)

        def allowed(self, repo: str, auth: str | None) -> bool:
            return repo not in state.private or auth == f"Bearer {state.token}"

        def tree(self, repo: str, query: dict[str, list[str]], auth: str | None) -> None:
            if repo not in state.repos:
                return self.reply(404)
            if not self.allowed(repo, auth):
                return self.reply(401)
            if state.tree_body is not None:
                return self.reply(200, state.tree_body, {"Content-Type": "application/json"})
            items: list[dict[str, object]] = []
            for p, f in state.repos[repo].items():
                entry: dict[str, object] = {"type": "file", "path": p, "size": f.size, "oid": f.oid[:40]}
                if p.endswith(".gguf"):
                    entry["lfs"] = {"oid": f.oid, "size": f.size, "pointerSize": 134}
                items.append(entry)
            start = int(query.get("cursor", ["0"])[0])
            page = items[start : start + state.page_size]
            headers = {"Content-Type": "application/json"}
            if start + state.page_size < len(items):
                nxt = f"/api/models/{repo}/tree/main?recursive=true&cursor={start + state.page_size}"
                headers["Link"] = f'<{nxt}>; rel="next"'
            return self.reply(200, json.dumps(page).encode(), headers)

        def resolve(self, repo: str, path: str, auth: str | None) -> None:
            f = state.repos.get(repo, {}).get(path)
            if f is None:
                return self.reply(404)
            if not self.allowed(repo, auth):
                return self.reply(401)
            loc = f"{state.cdn_base}/blob/{f.oid}?sig=x"
            return self.reply(
                302, b"", {"Location": loc, "X-Linked-Etag": f'"{f.oid}"', "X-Linked-Size": str(f.size)}
            )

    return Hub


def _cdn_handler(state: HubState) -> type[BaseHTTPRequestHandler]:
    class Cdn(_Quiet):
        def do_GET(self) -> None:
            rng = self.headers.get("Range")
            with state.lock:
                state.cdn_log.append((self.path, rng, self.headers.get("Authorization")))
            m = re.fullmatch(r"/blob/([0-9a-f]+)", urllib.parse.urlsplit(self.path).path)
            f = state.by_oid(m.group(1)) if m else None
            if f is None:
                return self.reply(404)
            r = re.fullmatch(r"bytes=(\d+)-(\d+)", rng or "")
            if not state.honour_range or r is None:
                return self.whole(f)
            start, end = int(r.group(1)), min(int(r.group(2)), f.size - 1)
            if start >= f.size:
                return self.reply(416)
            chunk = f.data[start : end + 1]
            chunk += bytes(end + 1 - start - len(chunk))  # the hole reads as zeros
            with state.lock:
                state.cdn_bytes += len(chunk)
            headers = {"Content-Range": f"bytes {start}-{end}/{f.size}", "ETag": f'"{f.oid}"'}
            return self.reply(206, chunk, headers)

        def whole(self, f: RepoFile) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(f.size))
            self.end_headers()
            try:
                for i in range(0, f.size, 1 << 16):
                    n = min(1 << 16, f.size - i)
                    self.wfile.write(bytes(n))
                    with state.lock:
                        state.cdn_bytes += n
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Cdn


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """The base URL of `handler` served on a loopback port by a thread, stopped on exit."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(5)


@contextmanager
def fake_hub(state: HubState | None = None) -> Iterator[tuple[str, HubState]]:
    """(hub endpoint, state) of a running pair of loopback servers, stopped on exit."""
    st = state if state is not None else HubState()
    with serve(_cdn_handler(st)) as cdn, serve(_hub_handler(st)) as hub:
        st.cdn_base = cdn
        yield hub, st


# -- a repository of quants from a fixture header ----------------------------------------------------------------

#: general.file_type (llama.cpp LlamaFileType) and the type of every quantized matrix, per quant.
QUANTS: dict[str, tuple[int, GGMLQuantizationType]] = {
    "Q2_K": (10, Q.Q2_K),
    "Q3_K_M": (12, Q.Q3_K),
    "IQ4_XS": (30, Q.IQ4_XS),
    "Q5_K_M": (17, Q.Q5_K),
    "Q6_K": (18, Q.Q6_K),
    "Q8_0": (7, Q.Q8_0),
    "BF16": (32, Q.BF16),
}


def _vtype(v: MetadataValue) -> GGUFValueType:
    if isinstance(v, bool):
        return GGUFValueType.BOOL
    if isinstance(v, int):
        return GGUFValueType.UINT32 if 0 <= v < 1 << 32 else GGUFValueType.INT64
    if isinstance(v, float):
        return GGUFValueType.FLOAT32
    return GGUFValueType.STRING


def _plain(v: MetadataValue) -> object:
    if isinstance(v, GGUFArray):
        return [_plain(x) for x in v.values or ()]
    return v


def _nbytes(qtype: GGMLQuantizationType, shape: tuple[int, ...]) -> int:
    blk, size = GGML_QUANT_SIZES[qtype]
    n = 1
    for d in shape[1:]:
        n *= d
    return n * (shape[0] // blk) * size


def write_header_only(
    path: Path,
    h: GGUFHeader,
    tensors: list[tuple[str, tuple[int, ...], GGMLQuantizationType]],
    meta: dict[str, MetadataValue],
) -> None:
    """A header-only GGUF with `meta` (after general.architecture) and these tensor infos, ending at the data."""
    w = GGUFWriter(path, h.architecture)
    for k, v in meta.items():
        if isinstance(v, GGUFArray):
            w.add_key_value(k, _plain(v), GGUFValueType.ARRAY, sub_type=GGUFValueType(v.element_type))
        else:
            w.add_key_value(k, v, _vtype(v))
    w.add_key_value("fitplan.header_only", True, GGUFValueType.BOOL)
    for name, shape, qtype in tensors:
        w.add_tensor_info(
            name, tuple(reversed(shape)), np.dtype(np.float32), _nbytes(qtype, shape), raw_dtype=qtype
        )
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    assert w.fout is not None
    end = w.fout[0].tell()
    w.close()
    os.truncate(path, (end + w.data_alignment - 1) // w.data_alignment * w.data_alignment)


def requant(src: Path, dst: Path, quant: str | None, shards: int = 1) -> list[Path]:
    """`src` with every quantized matrix re-typed for `quant` (None: as it is), as `shards` header-only files."""
    h = read_header(src, allow_incomplete=True, array_limit=1 << 30)
    meta = {k: v for k, v in h.metadata.items() if k != "general.architecture"}
    tensors = []
    for t in h.tensors:
        qtype = Q(t.ggml_type)
        if quant is not None and t.ggml_type not in (Q.F32, Q.F16):
            ftype, qtype = QUANTS[quant]
            meta["general.file_type"] = ftype
            if t.shape[0] % GGML_QUANT_SIZES[qtype][0]:
                qtype = Q.Q8_0 if t.shape[0] % 32 == 0 else Q.F16
        tensors.append((t.name, t.shape, qtype))
    dst.parent.mkdir(parents=True, exist_ok=True)
    if shards == 1:
        write_header_only(dst, h, tensors, meta)
        return [dst]
    stem = dst.name.removesuffix(".gguf")
    per = -(-len(tensors) // shards)
    out = []
    for i in range(shards):
        p = dst.with_name(f"{stem}-{i + 1:05d}-of-{shards:05d}.gguf")
        split: dict[str, MetadataValue] = {
            "split.no": i,
            "split.count": shards,
            "split.tensors.count": len(tensors),
        }
        write_header_only(p, h, tensors[i * per : (i + 1) * per], {**meta, **split} if i == 0 else split)
        out.append(p)
    return out


#: The repository name the shared `hub` fixture serves `quant_repo` under.
TEST_REPO = "test/Qwen2.5-VL-7B-Instruct-GGUF"


def quant_repo(folder: Path) -> Path:
    """A 12-GGUF-file repository of Qwen2.5-VL-7B (fixture header): six single-file quants, the fixture's own
    Q4_K_M mix among them, Q8_0 as 2 shards and BF16 as 3 (in folders), a projector, and three non-GGUF files."""
    base = SPARSE / "qwen2.5-vl-7b.header.gguf"
    name = "Qwen2.5-VL-7B-Instruct"
    for q in ("Q2_K", "Q3_K_M", "IQ4_XS", "Q5_K_M", "Q6_K"):
        requant(base, folder / f"{name}-{q}.gguf", q)
    requant(base, folder / f"{name}-Q4_K_M.gguf", None)
    requant(base, folder / "Q8_0" / f"{name}-Q8_0.gguf", "Q8_0", shards=2)
    requant(base, folder / "BF16" / f"{name}-BF16.gguf", "BF16", shards=3)
    requant(SPARSE / "mmproj-qwen2.5-vl-7b.header.gguf", folder / "mmproj-F16.gguf", None)
    (folder / "README.md").write_text("# test repository\n")
    (folder / "config.json").write_text("{}\n")
    (folder / ".gitattributes").write_text("*.gguf filter=lfs\n")
    return folder


def flags_without_model(argv: Sequence[str]) -> list[str]:
    """The flags of a command, without the program and the model and projector arguments (a Hub row's command
    names the model by `-hf`, the same plan's on a local file by `-m` and `--mmproj`)."""
    out: list[str] = []
    skip = False
    for a in argv[1:]:
        if skip:
            skip = False
        elif a in ("-m", "-hf", "-mu", "--mmproj", "-mmu"):
            skip = True
        else:
            out.append(a)
    return out
