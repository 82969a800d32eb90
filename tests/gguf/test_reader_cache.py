"""On-disk cache of parsed headers and profiles: keyed by (path, size, mtime_ns); corrupt entries ignored."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fitplan.core.gguf import header_cache as profile_cache
from fitplan.core.gguf.header_cache import CACHE_DIR_ENV, ProfileCache, cached_read_header, default_cache_dir
from fitplan.core.gguf.reader import read_header
from gguf import GGUFWriter


def write_model(path: Path, blocks: int = 4, n_tokens: int = 5000) -> Path:
    w = GGUFWriter(str(path), "llama")
    w.add_uint32("llama.block_count", blocks)
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(n_tokens)])
    w.add_array("llama.attention.head_count_kv", [2, 4, 2, 4])
    w.add_array("nested", [[1, 2], [3]])
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_bool("llama.flag", False)
    w.add_tensor("w", np.zeros((2, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def cache(tmp_path: Path) -> ProfileCache:
    return ProfileCache(tmp_path / "cache")


def test_roundtrip_equals_fresh_read(
    tmp_path: Path, cache: ProfileCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = write_model(tmp_path / "m.gguf")
    first = cached_read_header(p, cache=cache)
    assert first == read_header(p)

    def fail(*a: object, **k: object) -> None:
        raise AssertionError("the file was parsed again")

    monkeypatch.setattr(profile_cache, "read_header", fail)
    again = cached_read_header(p, cache=cache)
    assert again == first  # metadata (incl. skipped and nested arrays), tensors, offsets
    assert dict(again.metadata) == dict(first.metadata)


def test_changed_file_is_read_again(tmp_path: Path, cache: ProfileCache) -> None:
    p = write_model(tmp_path / "m.gguf", blocks=4)
    assert cached_read_header(p, cache=cache).get_int("llama.block_count") == 4
    st = p.stat()
    write_model(p, blocks=5)  # same size (one u32 differs)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert p.stat().st_size == st.st_size
    assert cached_read_header(p, cache=cache).get_int("llama.block_count") == 5


def test_options_are_part_of_the_key(tmp_path: Path, cache: ProfileCache) -> None:
    p = write_model(tmp_path / "m.gguf")
    skipped = cached_read_header(p, cache=cache)
    kept = cached_read_header(p, cache=cache, keep_arrays={"tokenizer.ggml.tokens"})
    tokens = kept.metadata["tokenizer.ggml.tokens"]
    assert getattr(skipped.metadata["tokenizer.ggml.tokens"], "values", 0) is None
    assert getattr(tokens, "values", None) is not None


def test_corrupt_entries_are_ignored(tmp_path: Path, cache: ProfileCache) -> None:
    p = write_model(tmp_path / "m.gguf")
    good = cached_read_header(p, cache=cache)
    entries = list(cache.directory.glob("*.bin"))
    assert len(entries) == 1
    for junk in (b"", b"\x00garbage", entries[0].read_bytes()[:-7]):
        entries[0].write_bytes(junk)
        assert cache.get_header(p, "gguf-header:4096:") is None
        assert cached_read_header(p, cache=cache) == good  # read again and rewritten


def test_incomplete_file_not_cached(tmp_path: Path, cache: ProfileCache) -> None:
    p = write_model(tmp_path / "m.gguf")
    data = p.read_bytes()
    p.write_bytes(data[:-64])
    h = cached_read_header(p, cache=cache, allow_incomplete=True)
    assert h.file_size is not None and h.file_size < h.expected_file_size
    assert list(cache.directory.glob("*.bin")) == []


@dataclass(frozen=True, slots=True)
class FakeProfile:
    name: str
    layers: tuple[int, ...]


def test_generic_get_put(tmp_path: Path, cache: ProfileCache) -> None:
    p = write_model(tmp_path / "m.gguf")
    assert cache.get(p, "profile") is None
    cache.put(p, "profile", FakeProfile("m", (1, 2)))
    assert cache.get(p, "profile") == FakeProfile("m", (1, 2))
    assert cache.get(p, "other-kind") is None
    assert cache.get(tmp_path / "missing.gguf", "profile") is None
    cache.clear()
    assert cache.get(p, "profile") is None


def test_cache_dir_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "envcache"))
    assert default_cache_dir() == tmp_path / "envcache"
    p = write_model(tmp_path / "m.gguf")
    cached_read_header(p)
    assert len(list((tmp_path / "envcache").glob("*.bin"))) == 1


def test_unwritable_cache_only_costs_speed(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    p = write_model(tmp_path / "m.gguf")
    h = cached_read_header(p, cache=ProfileCache(blocker / "sub"))  # cannot mkdir under a file
    assert h.get_int("llama.block_count") == 4
