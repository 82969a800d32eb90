"""Hostile-input suite, class 3 (the library scan): filesystem traps in temporary folders.

Each generated tree holds one good model beside a seeded choice of traps: FIFOs named like models, Hugging Face
cache blobs that are FIFOs (`blobs/*.incomplete`, a snapshot link to a FIFO blob), links to /dev/zero, folders and
sockets named *.gguf, link loops, broken links, broken and hostile GGUF files, and ollama stores whose manifests are
FIFOs, 100,000 nested brackets, 2 MB long, or name digests that leave `blobs/` ("../x", absolute paths). `fitplan
scan` must list the good model and exit 0 every time, within the harness's time and memory caps.
"""

from __future__ import annotations

import json
import math
import os
import random
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fitplan.core.base.errors import FileAccessError
from fitplan.core.gguf.header_cache import ProfileCache, cached_read_header, header_to_plain
from fitplan.core.gguf.reader import read_header
from fitplan.core.library import LibraryRoot, LibraryScanner, MemoryScanIndex
from support.hostile import Case, Outcome, base_kvs, base_tensors, counts_line, run_cases, write_gguf

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo") or sys.platform == "win32", reason="POSIX traps")

SEED = 31
N_RANDOM_TREES = 30
OLLAMA_MODEL = "application/vnd.ollama.image.model"
HEX = "0123456789abcdef"


def _good(folder: Path, name: str = "good.gguf") -> str:
    folder.mkdir(parents=True, exist_ok=True)
    return write_gguf(folder / name, "llama", base_kvs(), base_tensors(2))


def _manifest(store: Path, name: str, layers: list[dict[str, object]] | str | bytes) -> Path:
    path = store / "manifests" / "registry.ollama.ai" / "library" / name / "latest"
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(layers, bytes):
        path.write_bytes(layers)
    else:
        path.write_text(layers if isinstance(layers, str) else json.dumps({"layers": layers}))
    return path


def _store(root: Path) -> Path:
    store = root / "ollama"
    (store / "blobs").mkdir(parents=True, exist_ok=True)
    (store / "manifests").mkdir(parents=True, exist_ok=True)
    return store


def trap_fifo(root: Path, rng: random.Random) -> None:
    os.mkfifo(root / f"fifo{rng.randrange(1000)}.gguf")


def trap_hub_fifo(root: Path, rng: random.Random) -> None:
    repo = root / "hub" / f"models--org--r{rng.randrange(1000)}"
    blobs = repo / "blobs"
    snap = repo / "snapshots" / "rev"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    digest = "".join(rng.choice(HEX) for _ in range(64))
    os.mkfifo(blobs / f"{digest}.incomplete")
    os.mkfifo(blobs / digest)
    os.symlink(blobs / digest, snap / "model.gguf")


def trap_dev_zero(root: Path, rng: random.Random) -> None:
    os.symlink(
        rng.choice(("/dev/zero", "/dev/urandom", "/dev/null")), root / f"dev{rng.randrange(1000)}.gguf"
    )


def trap_dir_named_gguf(root: Path, rng: random.Random) -> None:
    (root / f"dir{rng.randrange(1000)}.gguf").mkdir()


def trap_socket(root: Path, rng: random.Random) -> None:
    path = root / f"s{rng.randrange(100)}.gguf"
    if len(os.fsencode(path)) > 100:  # AF_UNIX path limit
        return
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.fspath(path))
    s.close()


def trap_links(root: Path, rng: random.Random) -> None:
    loop = root / f"loop{rng.randrange(1000)}"
    loop.mkdir()
    os.symlink(loop, loop / "again")
    os.symlink(root / "nowhere.gguf", root / f"broken{rng.randrange(1000)}.gguf")


def trap_bad_files(root: Path, rng: random.Random) -> None:
    (root / f"garbage{rng.randrange(1000)}.gguf").write_bytes(rng.randbytes(rng.randrange(0, 4096)))
    kvs = base_kvs()
    kvs["llama.block_count"] = rng.choice((("f32", math.nan), ("u32", 10**7), ("i32", -1), ("f64", math.inf)))
    write_gguf(root / f"hostile{rng.randrange(1000)}.gguf", "llama", kvs, base_tensors(2))
    good = Path(_good(root / "trunc", f"t{rng.randrange(1000)}.gguf"))
    with open(good, "r+b") as f:
        f.truncate(rng.randrange(8, good.stat().st_size))


def trap_ollama(root: Path, rng: random.Random) -> None:
    store = _store(root)
    kind = rng.randrange(7)
    if kind == 0:
        path = store / "manifests" / "registry.ollama.ai" / "library" / "fifo" / "latest"
        path.parent.mkdir(parents=True)
        os.mkfifo(path)
    elif kind == 1:
        _manifest(store, "deep", "[" * 100_000 + "]" * 100_000)
    elif kind == 2:
        _manifest(store, "huge", json.dumps({"layers": [], "pad": "x" * (2 << 20)}))
    elif kind == 3:
        bad = rng.choice(
            ("../x", "/etc/passwd", "sha256:../../etc/passwd", "sha256-" + "a" * 64, "sha256:" + "A" * 64)
        )
        _manifest(store, "escape", [{"mediaType": OLLAMA_MODEL, "digest": bad}])
    elif kind == 4:
        digest = "".join(rng.choice(HEX) for _ in range(64))
        os.mkfifo(store / "blobs" / f"sha256-{digest}")
        _manifest(store, "fifoblob", [{"mediaType": OLLAMA_MODEL, "digest": f"sha256:{digest}"}])
    elif kind == 5:
        digest = "".join(rng.choice(HEX) for _ in range(64))
        os.symlink("/dev/zero", store / "blobs" / f"sha256-{digest}")
        _manifest(store, "zeroblob", [{"mediaType": OLLAMA_MODEL, "digest": f"sha256:{digest}"}])
    else:
        _manifest(store, "binary", rng.randbytes(64))
    digest = "".join(rng.choice(HEX) for _ in range(64))
    _good(store / "blobs", f"sha256-{digest}")
    _manifest(store, "goodone", [{"mediaType": OLLAMA_MODEL, "digest": f"sha256:{digest}"}])


TRAPS: tuple[Callable[[Path, random.Random], None], ...] = (
    trap_fifo,
    trap_hub_fifo,
    trap_dev_zero,
    trap_dir_named_gguf,
    trap_socket,
    trap_links,
    trap_bad_files,
    trap_ollama,
    trap_ollama,
    trap_ollama,
)


def _lists(good: str, ollama: bool) -> Callable[[Outcome], str | None]:
    def check(o: Outcome) -> str | None:
        doc = json.loads(o.out)
        paths = {m["path"] for m in doc["models"]}
        if good not in paths:
            return f"the good model is not listed ({len(paths)} listed, skipped {doc['skipped'][:3]})"
        if ollama and not any(m.get("display_name") == "goodone:latest" for m in doc["models"]):
            return "the good ollama model is not listed"
        outside = [m["path"] for m in doc["models"] if not m["path"].startswith(o_root(good))]
        if outside:
            return f"a model outside the scanned folder: {outside[:2]}"
        return None

    return check


def o_root(good: str) -> str:
    return os.path.dirname(good)


def _tree_cases(
    root: Path, name: str, traps: list[Callable[[Path, random.Random], None]], rng: random.Random
) -> list[Case]:
    tree = root / name
    tree.mkdir()
    good = _good(tree)
    for trap in traps:
        trap(tree, rng)
    ollama = trap_ollama in traps
    label = f"{name} ({', '.join(t.__name__ for t in traps)})"
    check = _lists(good, ollama)
    return [
        Case(
            f"{label} [scan --json --no-fit]",
            ("scan", str(tree), "--json", "--no-fit"),
            True,
            "answer",
            check,
        ),
        Case(
            f"{label} [scan --json]",
            ("scan", str(tree), "--json", "--assume-gpu", "24GiB"),
            True,
            "answer",
            check,
        ),
        Case(f"{label} [scan]", ("scan", str(tree), "--no-fit"), False, "answer"),
    ]


def test_hostile_library_trees(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    cases: list[Case] = []
    for i, trap in enumerate(TRAPS):  # each trap alone
        cases += _tree_cases(tmp_path, f"single{i}", [trap], rng)
    for i in range(N_RANDOM_TREES):  # seeded mixtures
        traps = list(dict.fromkeys(rng.choices(TRAPS, k=rng.randrange(2, 5))))
        cases += _tree_cases(tmp_path, f"mix{i}", traps, rng)
    report = run_cases(cases)
    print(counts_line("class 3 (library scan)", report))
    assert not report.failures, "\n".join(report.failures[:30])


# -- caching rules --------------------------------------------------------------------------------------------


def test_os_errors_are_never_cached(tmp_path: Path) -> None:
    """A file the OS would not let us read (permission denied) is read again next scan: after a chmod it is listed."""
    good = _good(tmp_path)
    calls = {"n": 0}

    def reader(path: str) -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            raise FileAccessError("cannot open: Permission denied", None, path)
        return read_header(path)

    scanner = LibraryScanner(reader=reader, index=MemoryScanIndex())  # type: ignore[arg-type]
    first = scanner.scan([LibraryRoot(str(tmp_path))])
    assert first.models == () and "Permission denied" in first.skipped[0].reason
    second = scanner.scan([LibraryRoot(str(tmp_path))])
    assert [m.path for m in second.models] == [good] and calls["n"] == 2


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads files whatever their mode"
)
def test_permission_denied_does_not_survive_chmod(tmp_path: Path) -> None:
    good = Path(_good(tmp_path))
    good.chmod(0)
    scanner = LibraryScanner(index=MemoryScanIndex())
    assert scanner.scan([LibraryRoot(str(tmp_path))]).models == ()
    good.chmod(0o644)
    assert [m.path for m in scanner.scan([LibraryRoot(str(tmp_path))]).models] == [str(good)]


def _rewrite_keeping_size_and_mtime(path: Path, name: str) -> None:
    st = path.stat()
    kvs = base_kvs()
    kvs["general.name"] = ("str", name)
    write_gguf(path, "llama", kvs, base_tensors(2))
    assert path.stat().st_size == st.st_size  # same-length names: the same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns


def test_a_rewrite_with_the_same_size_and_mtime_is_noticed_by_the_scan(tmp_path: Path) -> None:
    path = Path(_good(tmp_path))
    scanner = LibraryScanner(index=MemoryScanIndex())
    assert [m.name for m in scanner.scan([LibraryRoot(str(tmp_path))]).models] == ["hostile"]
    _rewrite_keeping_size_and_mtime(path, "changed")
    assert [m.name for m in scanner.scan([LibraryRoot(str(tmp_path))]).models] == ["changed"]


def test_a_rewrite_with_the_same_size_and_mtime_is_noticed_by_the_header_cache(tmp_path: Path) -> None:
    path = Path(_good(tmp_path / "m"))
    cache = ProfileCache(tmp_path / "cache")
    assert cached_read_header(path, cache=cache).metadata["general.name"] == "hostile"
    _rewrite_keeping_size_and_mtime(path, "changed")
    h = cached_read_header(path, cache=cache)
    assert h.metadata["general.name"] == "changed"
    assert header_to_plain(h) == header_to_plain(read_header(path))
