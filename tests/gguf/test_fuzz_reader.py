"""Hostile input: the reader either succeeds or raises GGUFError — never another exception, never a hang, never a
huge allocation. Cases run on an in-memory byte source so thousands of them stay fast."""

from __future__ import annotations

import random
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from fitplan.core.base.errors import GGUFError
from fitplan.core.gguf.header import GGUFHeader
from fitplan.core.gguf.reader import MAX_ARRAY_DEPTH, MAX_HEADER_BYTES, parse_header
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter


class BytesSource:
    def __init__(self, data: bytes, known_size: bool = True) -> None:
        self.data = data
        self.known_size = known_size
        self.largest_read = 0

    @property
    def name(self) -> str:
        return "<memory>"

    @property
    def size(self) -> int | None:
        return len(self.data) if self.known_size else None

    @property
    def first_chunk(self) -> int:
        return 64  # small, so the growth path is exercised too

    @property
    def growth(self) -> int:
        return 2

    def read(self, offset: int, length: int) -> bytes:
        self.largest_read = max(self.largest_read, length)
        return self.data[offset : offset + length]


def parse(data: bytes, known_size: bool = True, array_limit: int = 4096) -> GGUFHeader:
    return parse_header(BytesSource(data, known_size), allow_incomplete=True, array_limit=array_limit)


def parse_or_gguf_error(
    data: bytes, known_size: bool = True, array_limit: int = 4096
) -> GGUFHeader | GGUFError:
    try:
        return parse(data, known_size, array_limit)
    except GGUFError as e:
        return e


@pytest.fixture(scope="module")
def small_header(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A small but varied header: strings, every array kind, nested arrays, tensors of several types."""
    path: Path = tmp_path_factory.mktemp("fuzz") / "small.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_uint32("llama.block_count", 2)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_bool("llama.flag", True)
    w.add_string("general.name", "tiny")
    w.add_array("llama.attention.head_count_kv", [2, 4])
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "a", "bb"])
    w.add_array("nested", [[1, 2], [3]])
    w.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float16))
    w.add_tensor(
        "blk.0.attn_q.weight", np.zeros((2, 34), dtype=np.uint8), raw_dtype=GGMLQuantizationType.Q8_0
    )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = path.read_bytes()
    h = parse(data)
    return data[: h.data_offset]


def test_small_header_is_valid(small_header: bytes) -> None:
    h = parse(small_header)
    assert h.get_int("llama.block_count") == 2 and len(h.tensors) == 2


def test_truncated_at_every_offset(small_header: bytes) -> None:
    full = parse(small_header)
    for cut in range(len(small_header)):
        for known, limit in ((True, 4096), (False, 4096), (True, 1)):
            r = parse_or_gguf_error(small_header[:cut], known, limit)
            if isinstance(r, GGUFHeader):
                # only possible when the cut falls in the padding after the last tensor info
                assert r.tensors == full.tensors, cut
            else:
                assert r.offset is None or r.offset <= cut, (cut, r)


def test_random_byte_flips(small_header: bytes) -> None:
    rng = random.Random(20240611)
    n_ok = n_err = 0
    start = time.perf_counter()
    for case in range(40_000):
        data = bytearray(small_header)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(data))
            data[i] = rng.randrange(256) if rng.random() < 0.7 else data[i] ^ (1 << rng.randrange(8))
        # every other case skips the arrays instead of building them (the length walk is hit too)
        r = parse_or_gguf_error(bytes(data), known_size=case % 3 != 0, array_limit=1 if case % 2 else 4096)
        if isinstance(r, GGUFHeader):
            n_ok += 1
        else:
            n_err += 1
    assert n_ok > 0 and n_err > 0  # both outcomes occur, so the cases are neither all trivial nor all fatal
    assert time.perf_counter() - start < 25


def _preamble(n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)


def _s(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (_preamble(2**63, 0), "tensor count 9223372036854775808 cannot fit"),
        (_preamble(0, 2**64 - 1), "metadata count 18446744073709551615 cannot fit"),
        (_preamble(0, 1) + struct.pack("<Q", 2**62) + b"k", "string length 4611686018427387904 exceeds"),
        (_preamble(0, 1) + _s(b"k") + struct.pack("<I", 8) + struct.pack("<Q", 2**62), "string length"),
        (
            _preamble(0, 1) + _s(b"k") + struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.UINT8, 2**62),
            "array length 4611686018427387904 exceeds the maximum",
        ),
        (
            _preamble(0, 1)
            + _s(b"k")
            + struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.UINT64, 2**26),
            "array of 67108864 uint64 exceeds the",
        ),
        (
            _preamble(0, 1)
            + _s(b"k")
            + struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.STRING, 2**29),
            "array of 536870912 strings exceeds",
        ),
        (
            _preamble(0, 1) + _s(b"k") + struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.ARRAY, 2**29),
            "array of 536870912 arrays exceeds",
        ),
        (
            _preamble(1, 0) + _s(b"w") + struct.pack("<I", 2**31),
            "has 2147483648 dimensions",
        ),
        (
            _preamble(1, 0) + _s(b"w") + struct.pack("<Iqq", 2, 2**62, 2**62) + struct.pack("<iQ", 0, 0),
            "elements",
        ),
        (
            _preamble(1, 0) + _s(b"w") + struct.pack("<Iq", 1, -5) + struct.pack("<iQ", 0, 0),
            "negative dimension",
        ),
    ],
)
def test_absurd_counts_fail_cleanly(data: bytes, problem: str) -> None:
    for known in (True, False):
        src = BytesSource(data + b"\0" * 64, known)
        with pytest.raises(GGUFError, match=problem):
            parse_header(src)
        # never asked for the absurd amount: at most the file, or the cap when the size is unknown
        assert src.largest_read <= (len(src.data) if known else MAX_HEADER_BYTES)


def test_header_size_is_capped() -> None:
    # 2^26 empty strings claim 512 MiB: plausible for a big file, but past the header cap, so refused before reading
    data = _preamble(0, 1) + _s(b"t") + struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.STRING, 2**26)

    class Huge(BytesSource):
        @property
        def size(self) -> int | None:
            return 2**40  # a 1 TiB file

    src = Huge(data + b"\0" * 1024)
    with pytest.raises(GGUFError, match=r"array of 67108864 strings exceeds the (\d+) bytes left") as e:
        parse_header(src)
    assert int(e.value.problem.split("exceeds the ")[1].split()[0]) < MAX_HEADER_BYTES
    assert src.largest_read < 1024 * 1024


def _nested(depth: int) -> bytes:
    """An array nested `depth` times (arrays of one array each), innermost an array of one u8."""
    body = (
        struct.pack("<IQ", GGUFValueType.ARRAY, 1) * (depth - 1)
        + struct.pack("<IQ", GGUFValueType.UINT8, 1)
        + b"\x07"
    )
    return _preamble(0, 1) + _s(b"deep") + struct.pack("<I", GGUFValueType.ARRAY) + body


def test_nesting_depth_bounded() -> None:
    ok = parse(_nested(MAX_ARRAY_DEPTH))
    assert ok.metadata["deep"] is not None
    with pytest.raises(GGUFError, match=f"nested deeper than {MAX_ARRAY_DEPTH}"):
        parse(_nested(MAX_ARRAY_DEPTH + 1))
    with pytest.raises(GGUFError, match="nested deeper"):
        parse(_nested(100_000))  # no RecursionError


def test_skipped_string_array_with_a_huge_length_inside(small_header: bytes) -> None:
    # 100k short strings (skipped, over the array limit), then one whose length points far past the end
    body = b"".join(_s(b"ab") for _ in range(100_000)) + struct.pack("<Q", 2**63)
    data = (
        _preamble(0, 1) + _s(b"t") + struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.STRING, 100_001)
    )
    for known in (True, False):
        r = parse_or_gguf_error(data + body, known)
        assert isinstance(r, GGUFError) and "element 100000" in r.problem


def test_walk_of_skipped_strings_is_exact() -> None:
    # strings of 0..49 bytes (n not a multiple of the unrolled block of 8), read through a source that hands out
    # 64 bytes first and doubles: the walk crosses the buffer end many times and must land on the next key exactly
    n = 5003
    body = b"".join(_s(b"x" * (i % 50)) for i in range(n))
    data = (
        _preamble(0, 2)
        + _s(b"t")
        + struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.STRING, n)
        + body
        + _s(b"after")
        + struct.pack("<II", GGUFValueType.UINT32, 42)
    )
    h = parse(data)
    assert h.metadata["after"] == 42


def _string_array_file(strings: list[bytes], bo: str = "<") -> bytes:
    def s(raw: bytes) -> bytes:
        return struct.pack(bo + "Q", len(raw)) + raw

    return (
        b"GGUF"
        + struct.pack(bo + "IQQ", 3, 0, 2)
        + s(b"t")
        + struct.pack(bo + "IIQ", GGUFValueType.ARRAY, GGUFValueType.STRING, len(strings))
        + b"".join(s(x) for x in strings)
        + s(b"after")
        + struct.pack(bo + "II", GGUFValueType.UINT32, 42)
    )


def _awkward_strings(rng: random.Random, n: int) -> list[bytes]:
    """Strings that trip a length-candidate scan: empty ones, runs of zero bytes, 255/256/300/70,000 bytes."""
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.05:
            out.append(b"")
        elif r < 0.10:
            out.append(b"\0" * rng.randint(1, 20))
        elif r < 0.12:
            out.append(bytes([rng.randrange(256)]) * rng.choice([255, 256, 300, 70_000]))
        else:
            out.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_bulk_walk_lands_exactly(seed: int) -> None:
    rng = random.Random(seed)
    strings = _awkward_strings(rng, rng.choice([4097, 5000, 9001]))  # over the array limit: skipped
    for bo in ("<", ">"):
        data = _string_array_file(strings, bo)
        for known in (True, False):
            h = parse(data, known)  # BytesSource: 64 bytes first, then doubling: many buffer ends crossed
            assert h.metadata["after"] == 42
            t = h.metadata["t"]
            assert getattr(t, "length", None) == len(strings) and getattr(t, "values", 0) is None
        kept = parse_header(BytesSource(data), keep_arrays={"t"})  # the per-string path agrees
        assert kept.metadata["after"] == 42


def test_bulk_walk_byte_flips() -> None:
    rng = random.Random(7)
    data0 = _string_array_file(_awkward_strings(rng, 4500))
    n_ok = n_err = 0
    for _ in range(1500):
        data = bytearray(data0)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        r = parse_or_gguf_error(bytes(data), known_size=rng.random() < 0.7)
        if isinstance(r, GGUFHeader):
            n_ok += 1
        else:
            n_err += 1
    assert n_ok > 0 and n_err > 0
