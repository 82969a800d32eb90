"""GGUF header reader: files written with gguf-py's GGUFWriter (and by hand for v1/v2 and ik_llama.cpp types),
cross-checked against gguf-py's GGUFReader field by field."""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fitplan.core.base.errors import GGUFError, IncompleteModelError, MissingShardError
from fitplan.core.gguf import ggml_types
from fitplan.core.gguf.header import GGUFArray, GGUFHeader
from fitplan.core.gguf.reader import (
    diff_against_gguf_py,
    find_mmproj_for,
    is_mmproj,
    name_tokens,
    open_model,
    rank_mmproj,
    read_header,
    split_shard_names,
)
from gguf import GGMLQuantizationType, GGUFEndian, GGUFValueType, GGUFWriter

# ---------------------------------------------------------------------------------------------------------------
# helpers


def write_with_gguf_py(
    path: Path,
    kv: Sequence[tuple[str, Any, GGUFValueType, GGUFValueType | None]] = (),
    tensors: Sequence[tuple[str, np.ndarray, GGMLQuantizationType | None, tuple[int, ...] | None]] = (),
    arch: str = "llama",
    endianess: GGUFEndian = GGUFEndian.LITTLE,
) -> Path:
    w = GGUFWriter(str(path), arch, endianess=endianess)
    for key, val, vtype, sub in kv:
        w.add_key_value(key, val, vtype, sub_type=sub)
    for name, data, raw_dtype, raw_shape in tensors:
        w.add_tensor(name, data, raw_shape=raw_shape, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


class RawGGUF:
    """A byte-level GGUF writer for what gguf-py cannot write (v1/v2, ik types, hostile values)."""

    def __init__(self, version: int = 3, bo: str = "<") -> None:
        self.version = version
        self.bo = bo
        self.kv: list[bytes] = []
        self.tensors: list[bytes] = []

    def s(self, text: str | bytes) -> bytes:
        raw = text.encode() if isinstance(text, str) else text
        return struct.pack(self.bo + "Q", len(raw)) + raw

    def add(self, key: str, vtype: int, payload: bytes) -> RawGGUF:
        self.kv.append(self.s(key) + struct.pack(self.bo + "I", vtype) + payload)
        return self

    def add_u32(self, key: str, v: int) -> RawGGUF:
        return self.add(key, GGUFValueType.UINT32, struct.pack(self.bo + "I", v))

    def add_str(self, key: str, v: str) -> RawGGUF:
        return self.add(key, GGUFValueType.STRING, self.s(v))

    def add_tensor(self, name: str, shape: tuple[int, ...], gtype: int, offset: int) -> RawGGUF:
        b = self.s(name) + struct.pack(self.bo + "I", len(shape))
        b += b"".join(struct.pack(self.bo + "q", d) for d in shape)
        b += struct.pack(self.bo + "iQ", gtype, offset)
        self.tensors.append(b)
        return self

    def header(self, n_tensors: int | None = None, n_kv: int | None = None) -> bytes:
        nt = len(self.tensors) if n_tensors is None else n_tensors
        nk = len(self.kv) if n_kv is None else n_kv
        return (
            b"GGUF"
            + struct.pack(self.bo + "IQQ", self.version, nt, nk)
            + b"".join(self.kv)
            + b"".join(self.tensors)
        )

    def write(self, path: Path, data_bytes: int = 0, alignment: int = 32) -> Path:
        h = self.header()
        pad = (-len(h) % alignment) if self.tensors else 0
        path.write_bytes(h + b"\0" * pad + b"\x55" * data_bytes)
        return path


def assert_matches_gguf_py(path: Path, header: GGUFHeader) -> None:
    assert diff_against_gguf_py(path, header) == []


EVERY_SCALAR: list[tuple[str, Any, GGUFValueType]] = [
    ("t.u8", 200, GGUFValueType.UINT8),
    ("t.i8", -100, GGUFValueType.INT8),
    ("t.u16", 60000, GGUFValueType.UINT16),
    ("t.i16", -30000, GGUFValueType.INT16),
    ("t.u32", 4_000_000_000, GGUFValueType.UINT32),
    ("t.i32", -2_000_000_000, GGUFValueType.INT32),
    ("t.f32", 0.5, GGUFValueType.FLOAT32),
    ("t.bool", True, GGUFValueType.BOOL),
    ("t.str", "héllo wörld ✓", GGUFValueType.STRING),
    ("t.u64", 2**63 + 5, GGUFValueType.UINT64),
    ("t.i64", -(2**62), GGUFValueType.INT64),
    ("t.f64", 1.0 / 3.0, GGUFValueType.FLOAT64),
]


def every_type_kv() -> list[tuple[str, Any, GGUFValueType, GGUFValueType | None]]:
    kv: list[tuple[str, Any, GGUFValueType, GGUFValueType | None]] = [
        (k, v, t, None) for k, v, t in EVERY_SCALAR
    ]
    for k, v, t in EVERY_SCALAR:
        kv.append((k + ".arr", [v, v], GGUFValueType.ARRAY, t))
    kv.append(("t.nested", [[1, 2], [3, 4, 5]], GGUFValueType.ARRAY, None))
    kv.append(("t.nested_str", [["a", "bb"], ["ccc"]], GGUFValueType.ARRAY, None))
    kv.append(("t.long", list(range(5000)), GGUFValueType.ARRAY, GGUFValueType.INT32))
    kv.append(("t.long_str", [f"tok{i}" for i in range(5000)], GGUFValueType.ARRAY, GGUFValueType.STRING))
    return kv


def small_tensors() -> list[tuple[str, np.ndarray, GGMLQuantizationType | None, tuple[int, ...] | None]]:
    return [
        ("a.weight", np.ones((3, 64), dtype=np.float32), None, None),
        ("b.weight", np.ones((2, 32), dtype=np.float16), None, None),
        # quantized tensors are given as bytes, rows first: Q8_0 2 rows of 64 -> 2 blocks of 34 B per row
        ("c.weight", np.zeros((2, 68), dtype=np.uint8), GGMLQuantizationType.Q8_0, None),
        # Q4_K: 1 row of 256 -> 1 block of 144 bytes
        ("d.weight", np.zeros((1, 144), dtype=np.uint8), GGMLQuantizationType.Q4_K, None),
    ]


# ---------------------------------------------------------------------------------------------------------------
# value types, byte orders, versions


@pytest.mark.parametrize("endianess", [GGUFEndian.LITTLE, GGUFEndian.BIG])
def test_every_value_type_matches_gguf_py(tmp_path: Path, endianess: GGUFEndian) -> None:
    p = write_with_gguf_py(tmp_path / "all.gguf", every_type_kv(), small_tensors(), endianess=endianess)
    h = read_header(p)
    assert h.byte_order == ("<" if endianess == GGUFEndian.LITTLE else ">")
    assert h.version == 3
    for key, value, _t in EVERY_SCALAR:
        got = h.metadata[key]
        if isinstance(value, float) and key == "t.f32":
            assert got == float(np.float32(value))
        else:
            assert got == value and type(got) is type(value)
        arr = h.metadata[key + ".arr"]
        assert isinstance(arr, GGUFArray) and arr.length == 2 and arr.values == (got, got)
    nested = h.metadata["t.nested"]
    assert nested == GGUFArray(
        int(GGUFValueType.ARRAY),
        2,
        (GGUFArray(int(GGUFValueType.INT32), 2, (1, 2)), GGUFArray(int(GGUFValueType.INT32), 3, (3, 4, 5))),
    )
    # longer than DEFAULT_ARRAY_LIMIT (4096): length and type only
    assert h.metadata["t.long"] == GGUFArray(int(GGUFValueType.INT32), 5000, None)
    assert h.metadata["t.long_str"] == GGUFArray(int(GGUFValueType.STRING), 5000, None)
    assert_matches_gguf_py(p, h)


def test_tensor_infos_sizes_and_offsets(tmp_path: Path) -> None:
    p = write_with_gguf_py(tmp_path / "t.gguf", [], small_tensors())
    h = read_header(p)
    got = [(t.name, t.ggml_type, t.shape, t.offset, t.n_bytes) for t in h.tensors]
    assert got == [
        ("a.weight", 0, (64, 3), 0, 64 * 3 * 4),  # 768 bytes, next offset pads 768 to 768
        ("b.weight", 1, (32, 2), 768, 32 * 2 * 2),  # 128 bytes
        ("c.weight", 8, (64, 2), 896, 136),  # 136 -> padded to 160
        ("d.weight", 12, (256, 1), 1056, 144),
    ]
    assert h.data_offset % 32 == 0
    assert h.expected_file_size == h.data_offset + 1056 + 144
    assert h.file_size == os.path.getsize(p)
    assert_matches_gguf_py(p, h)


def test_keep_arrays_and_array_limit(tmp_path: Path) -> None:
    p = write_with_gguf_py(tmp_path / "a.gguf", every_type_kv())
    h = read_header(p, keep_arrays={"t.long_str"})
    arr = h.metadata["t.long_str"]
    assert isinstance(arr, GGUFArray) and arr.values is not None
    assert arr.values[:2] == ("tok0", "tok1") and arr.values[-1] == "tok4999"
    assert h.metadata["t.long"] == GGUFArray(int(GGUFValueType.INT32), 5000, None)
    h2 = read_header(p, array_limit=1)
    assert h2.metadata["t.u8.arr"] == GGUFArray(int(GGUFValueType.UINT8), 2, None)
    nested = h2.metadata["t.nested"]
    assert isinstance(nested, GGUFArray) and nested.length == 2 and nested.values is None
    # the walk over skipped arrays ends where gguf-py says the next key starts: every later key still matches
    assert_matches_gguf_py(p, h2)


def test_version2_file_written_by_hand(tmp_path: Path) -> None:
    g = RawGGUF(version=2).add_str("general.architecture", "llama").add_u32("llama.block_count", 7)
    g.add_tensor("w", (32, 2), int(GGMLQuantizationType.F16), 0)
    p = g.write(tmp_path / "v2.gguf", data_bytes=128)
    h = read_header(p)
    assert h.version == 2 and h.architecture == "llama" and h.get_int("llama.block_count") == 7
    assert h.tensors[0].n_bytes == 32 * 2 * 2
    assert_matches_gguf_py(p, h)


def test_empty_array_by_hand(tmp_path: Path) -> None:
    # gguf-py cannot write an empty array; llama.cpp reads one (n = 0)
    g = (
        RawGGUF()
        .add("e", GGUFValueType.ARRAY, struct.pack("<IQ", GGUFValueType.INT32, 0))
        .add_u32("after", 5)
    )
    p = g.write(tmp_path / "e.gguf")
    h = read_header(p)
    assert h.metadata["e"] == GGUFArray(int(GGUFValueType.INT32), 0, ())
    assert h.metadata["after"] == 5
    assert_matches_gguf_py(p, h)


def test_big_endian_by_hand(tmp_path: Path) -> None:
    g = RawGGUF(version=3, bo=">").add_u32("x", 0x01020304)
    h = read_header(g.write(tmp_path / "be.gguf"))
    assert h.byte_order == ">" and h.metadata["x"] == 0x01020304


def test_version1_rejected_clearly(tmp_path: Path) -> None:
    p = RawGGUF(version=1).write(tmp_path / "v1.gguf")
    with pytest.raises(GGUFError, match="version 1 is no longer supported") as e:
        read_header(p)
    assert e.value.offset == 4


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"GGML" + b"\0" * 20, "not a GGUF file"),
        (b"GGUF" + struct.pack("<I", 9) + b"\0" * 16, "unsupported GGUF version 9"),
        (b"GGU", "file ends at byte 3"),
    ],
)
def test_bad_preamble(tmp_path: Path, content: bytes, problem: str) -> None:
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    with pytest.raises(GGUFError, match=problem):
        read_header(p)


def test_structural_errors(tmp_path: Path) -> None:
    dup = RawGGUF().add_u32("a", 1).add_u32("a", 2).write(tmp_path / "dup.gguf")
    with pytest.raises(GGUFError, match="duplicate metadata key 'a'"):
        read_header(dup)
    align = RawGGUF().add_u32("general.alignment", 48).write(tmp_path / "align.gguf")
    with pytest.raises(GGUFError, match="not a power of two"):
        read_header(align)
    align_type = RawGGUF().add("general.alignment", GGUFValueType.UINT64, struct.pack("<Q", 64))
    with pytest.raises(GGUFError, match=r"general\.alignment must be a uint32, not uint64"):
        read_header(align_type.write(tmp_path / "align64.gguf"))
    unknown = RawGGUF().add_tensor("w", (32,), 77, 0).write(tmp_path / "type.gguf", 64)
    with pytest.raises(GGUFError, match="unknown ggml type 77"):
        read_header(unknown)
    block = (
        RawGGUF().add_tensor("w", (48,), int(GGMLQuantizationType.Q4_0), 0).write(tmp_path / "blk.gguf", 64)
    )
    with pytest.raises(GGUFError, match="not a multiple of block size 32"):
        read_header(block)
    gap = RawGGUF().add_tensor("w", (8,), 0, 64).write(tmp_path / "gap.gguf", 128)
    with pytest.raises(GGUFError, match="data offset 64 \\(expected 0\\)"):
        read_header(gap)
    twice = RawGGUF().add_tensor("w", (8,), 0, 0).add_tensor("w", (8,), 0, 32).write(tmp_path / "tw.gguf", 64)
    with pytest.raises(GGUFError, match="duplicate tensor name 'w'"):
        read_header(twice)
    bad_value = RawGGUF().add("k", 13, b"\0" * 8).write(tmp_path / "vt.gguf")
    with pytest.raises(GGUFError, match="invalid value type 13") as e:
        read_header(bad_value)
    assert e.value.offset is not None and e.value.source == str(bad_value)


def test_no_tensors_means_no_data_padding(tmp_path: Path) -> None:
    # llama.cpp gguf.cpp seeks to the aligned data start only when n_tensors > 0
    g = RawGGUF().add_u32("k", 1)
    p = g.write(tmp_path / "vocab.gguf")
    h = read_header(p)
    assert h.data_offset == len(g.header()) == h.file_size
    assert h.tensors == () and h.data_size == 0


# ---------------------------------------------------------------------------------------------------------------
# incomplete files


def test_incomplete_file_reports_missing_bytes_and_keeps_header(tmp_path: Path) -> None:
    p = write_with_gguf_py(tmp_path / "m.gguf", [], small_tensors())
    full = p.read_bytes()
    expected = read_header(p).expected_file_size
    p.write_bytes(full[: expected - 100])
    with pytest.raises(IncompleteModelError) as e:
        read_header(p)
    assert e.value.expected_size == expected
    assert e.value.actual_size == expected - 100
    assert "100 bytes missing" in str(e.value)
    assert e.value.header is not None and len(e.value.header.tensors) == 4
    h = read_header(p, allow_incomplete=True)
    assert h.file_size == expected - 100 and h.expected_file_size == expected


def test_file_cut_inside_the_header_is_a_gguf_error(tmp_path: Path) -> None:
    p = write_with_gguf_py(tmp_path / "m.gguf", every_type_kv(), small_tensors())
    data = p.read_bytes()
    cut = read_header(p).data_offset - 40  # inside the last tensor info (the padding is under 32 bytes)
    p.write_bytes(data[:cut])
    with pytest.raises(
        GGUFError, match=f"file ends at byte {cut} inside the header while reading tensor"
    ) as e:
        read_header(p)
    assert not isinstance(e.value, IncompleteModelError)


# ---------------------------------------------------------------------------------------------------------------
# ggml types (sizes from gguf.constants and ik_llama.cpp's type_traits)


def test_type_table_follows_gguf_constants() -> None:
    from gguf.constants import GGML_QUANT_SIZES

    for qt, (blck, size) in GGML_QUANT_SIZES.items():
        t = ggml_types.get_type(int(qt))
        assert (t.block_size, t.type_size, t.name, t.ik_only) == (blck, size, qt.name, False)
    assert ggml_types.type_name(12) == "Q4_K" and ggml_types.type_id("q4_k") == 12
    assert ggml_types.type_id("IQ4_KS") == 144 and ggml_types.type_name(144) == "IQ4_KS"


def test_row_sizes() -> None:
    assert ggml_types.row_size(12, 4096) == 4096 // 256 * 144  # Q4_K: 16 blocks of 144 B = 2304
    assert ggml_types.row_size(8, 4096) == 4096 // 32 * 34  # Q8_0: 128 blocks of 34 B = 4352
    assert ggml_types.row_size(42, 128) == 2 * 18  # Q2_0 (b11434): 2 blocks of 18 B
    # ik types carry per-row metadata: Q8_KV MLA cache row of 576 = 8 + 576/32*32 = 584 B (forks notes, PR #240)
    assert ggml_types.row_size(151, 576) == 584
    assert ggml_types.row_size(144, 4096) == 4 + 16 * 136  # IQ4_KS: 4 B row meta + 16 blocks of 136 B
    assert ggml_types.nbytes(144, (4096, 10)) == 10 * (4 + 16 * 136)
    assert ggml_types.nbytes(0, (5, 0, 3)) == 0  # an empty dimension
    with pytest.raises(ValueError, match="not a multiple of the block size 256"):
        ggml_types.nbytes(12, (100, 2))
    with pytest.raises(ValueError, match="unknown ggml type id 999"):
        ggml_types.row_size(999, 32)


def test_ik_shared_ids() -> None:
    # id 36: unused in mainline, I2_S in ik: n/4 + 32 bytes (ik ggml_nbytes hack)
    assert ggml_types.nbytes(36, (128, 4)) == 128 * 4 // 4 + 32
    # id 41: Q1_0 in mainline, Q1_0_G128 in ik (same 18 B per 128)
    assert ggml_types.type_name(41) == "Q1_0" and ggml_types.type_name(41, ik=True) == "Q1_0_G128"
    assert ggml_types.is_ik_file([0, 1, 139]) and not ggml_types.is_ik_file([0, 1, 41])


def test_file_type_labels() -> None:
    assert ggml_types.file_type_label(15) == "Q4_K_M"
    assert ggml_types.file_type_label(0) == "F32"
    assert ggml_types.file_type_label(38) == "MXFP4_MOE"
    assert ggml_types.file_type_label(41) == "Q2_0"
    assert ggml_types.file_type_label(1024 | 7) == "Q8_0 (guessed)"


def test_ik_file_is_sized_with_row_meta(tmp_path: Path) -> None:
    g = RawGGUF().add_str("general.architecture", "deepseek2")
    # IQ4_KS [4096, 2]: rows of 4 + 16*136 = 2180 B -> 4360 B, padded to 4384 for the next tensor
    g.add_tensor("blk.0.ffn_up.weight", (4096, 2), 144, 0)
    g.add_tensor("blk.0.attn_k.weight", (576, 3), 151, 4384)  # Q8_KV: 3 * 584 = 1752 B
    p = g.write(tmp_path / "ik.gguf", data_bytes=4384 + 1752)
    h = read_header(p)
    assert [t.n_bytes for t in h.tensors] == [4360, 1752]
    assert h.expected_file_size == os.path.getsize(p)


# ---------------------------------------------------------------------------------------------------------------
# split models


def write_split_set(folder: Path, stem: str, n: int) -> list[Path]:
    paths = []
    for i in range(n):
        kv: list[tuple[str, Any, GGUFValueType, GGUFValueType | None]] = [
            ("split.no", i, GGUFValueType.UINT16, None),
            ("split.count", n, GGUFValueType.UINT16, None),
            ("split.tensors.count", 2 * n, GGUFValueType.INT32, None),
        ]
        tensors = [(f"blk.{2 * i + j}.w", np.ones((1, 32), dtype=np.float32), None, None) for j in range(2)]
        paths.append(write_with_gguf_py(folder / f"{stem}-{i + 1:05d}-of-{n:05d}.gguf", kv, tensors))
    return paths


@pytest.mark.parametrize("which", [0, 1, 2])
def test_opening_any_shard_loads_the_set_in_order(tmp_path: Path, which: int) -> None:
    paths = write_split_set(tmp_path, "Big-Model-Q4_K_M", 3)
    mf = open_model(paths[which])
    assert [h.source for h in mf.shards] == [str(p) for p in paths]
    assert [t.name for h in mf.shards for t in h.tensors] == [f"blk.{i}.w" for i in range(6)]
    assert mf.main.get_int("split.no") == 0
    assert mf.file_size == sum(os.path.getsize(p) for p in paths)
    assert mf.mmproj is None


def test_missing_shards_are_named(tmp_path: Path) -> None:
    paths = write_split_set(tmp_path, "m", 4)
    paths[1].unlink()
    paths[3].unlink()
    with pytest.raises(MissingShardError) as e:
        open_model(paths[0])
    assert e.value.missing == (str(paths[1]), str(paths[3]))
    assert "m-00002-of-00004.gguf" in str(e.value) and "m-00004-of-00004.gguf" in str(e.value)


def test_split_set_inconsistency(tmp_path: Path) -> None:
    paths = write_split_set(tmp_path, "m", 2)
    (tmp_path / "other").mkdir()
    other = write_split_set(tmp_path / "other", "m", 2)  # its first shard has split.no 0
    paths[1].write_bytes(other[0].read_bytes())
    with pytest.raises(GGUFError, match=r"split\.no is 0, expected 1"):
        open_model(paths[0])


def test_split_names() -> None:
    assert split_shard_names("x-00002-of-00003.gguf") == (
        "x-00001-of-00003.gguf",
        "x-00002-of-00003.gguf",
        "x-00003-of-00003.gguf",
    )
    assert split_shard_names("x.gguf") is None


# ---------------------------------------------------------------------------------------------------------------
# multimodal projectors


def write_clip(path: Path) -> Path:
    kv: list[tuple[str, Any, GGUFValueType, GGUFValueType | None]] = [
        ("clip.has_vision_encoder", True, GGUFValueType.BOOL, None),
        ("clip.projector_type", "gemma3", GGUFValueType.STRING, None),
    ]
    return write_with_gguf_py(path, kv, arch="clip")


def test_mmproj_recognised_and_paired(tmp_path: Path) -> None:
    model = write_with_gguf_py(tmp_path / "gemma-3-4b-it-Q4_K_M.gguf")
    write_clip(tmp_path / "mmproj-gemma-3-4b-it-bf16.gguf")
    best = write_clip(tmp_path / "mmproj-gemma-3-4b-it-f16.gguf")
    write_clip(tmp_path / "mmproj-qwen2.5-vl-7b-f16.gguf")
    assert find_mmproj_for(model) == best
    mf = open_model(model)
    assert mf.mmproj is not None and is_mmproj(mf.mmproj) and mf.mmproj.source == str(best)
    assert not is_mmproj(mf.main)
    # a projector opened on its own is not paired with another projector
    assert open_model(best).mmproj is None
    assert open_model(model, find_mmproj=False).mmproj is None


def test_mmproj_ranking_rule() -> None:
    assert name_tokens("Qwen2.5-VL-7B-Instruct-Q4_K_M.gguf") == ["qwen2", "5", "vl", "7b", "instruct"]
    assert name_tokens("mmproj-Qwen2.5-VL-7B-Instruct-f16.gguf") == ["qwen2", "5", "vl", "7b", "instruct"]
    ranked = rank_mmproj(
        "Qwen2.5-VL-7B-Instruct-Q4_K_M.gguf",
        [
            "mmproj-F16.gguf",
            "mmproj-Qwen2.5-VL-7B-Instruct-q8_0.gguf",
            "mmproj-Qwen2.5-VL-3B-Instruct-f16.gguf",
        ],
    )
    assert [p.name for p in ranked] == [
        "mmproj-Qwen2.5-VL-7B-Instruct-q8_0.gguf",  # 5 leading words shared
        "mmproj-Qwen2.5-VL-3B-Instruct-f16.gguf",  # 3 leading words
        "mmproj-F16.gguf",  # none
    ]
    # names that do not decide: precision preference f16 > bf16 > f32
    ranked = rank_mmproj("model.gguf", ["mmproj-f32.gguf", "mmproj-bf16.gguf", "mmproj-f16.gguf"])
    assert [p.name for p in ranked] == ["mmproj-f16.gguf", "mmproj-bf16.gguf", "mmproj-f32.gguf"]


def test_non_clip_mmproj_named_file_is_skipped(tmp_path: Path) -> None:
    model = write_with_gguf_py(tmp_path / "m-Q4_0.gguf")
    write_with_gguf_py(tmp_path / "mmproj-m-f16.gguf")  # named like a projector, but a llama model
    (tmp_path / "mmproj-m-bf16.gguf").write_bytes(b"junk")
    clip = write_clip(tmp_path / "mmproj-zzz.gguf")
    assert open_model(model).mmproj is not None and open_model(model).mmproj.source == str(clip)  # type: ignore[union-attr]
    with pytest.raises(GGUFError, match="not a multimodal projector"):
        open_model(model, mmproj=tmp_path / "mmproj-m-f16.gguf")


# ---------------------------------------------------------------------------------------------------------------
# the cross-check itself must be able to fail


def test_cross_check_detects_differences(tmp_path: Path) -> None:
    import dataclasses
    from types import MappingProxyType

    p = write_with_gguf_py(tmp_path / "x.gguf", every_type_kv(), small_tensors())
    h = read_header(p)
    meta = dict(h.metadata)
    meta["t.u32"] = 1
    bad = dataclasses.replace(h, metadata=MappingProxyType(meta))
    assert diff_against_gguf_py(p, bad) == ["t.u32: 1 != 4000000000"]
    t0 = dataclasses.replace(h.tensors[0], n_bytes=1)
    bad = dataclasses.replace(h, tensors=(t0, *h.tensors[1:]))
    assert len(diff_against_gguf_py(p, bad)) == 1


def test_header_only_files_are_complete_by_declaration(tmp_path: Path) -> None:
    """A file marked fitplan.header_only (the bundled examples) is a complete header, sized as declared; the same
    file without the key is an interrupted download."""
    import numpy as np

    import gguf
    from fitplan.core.base.errors import IncompleteModelError
    from fitplan.core.gguf.header import HEADER_ONLY_KEY, ModelFiles
    from fitplan.core.gguf.reader import read_header

    def write(path, header_only):
        w = gguf.GGUFWriter(str(path), "llama")
        if header_only:
            w.add_bool(HEADER_ONLY_KEY, True)
        w.add_tensor("token_embd.weight", np.zeros((64, 32), dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        w.close()

    marked, plain = tmp_path / "marked.gguf", tmp_path / "plain.gguf"
    write(marked, True)
    write(plain, False)
    h = read_header(marked)
    assert h.header_only and h.file_size is not None and h.file_size < h.expected_file_size
    assert h.declared_file_size == h.expected_file_size == h.data_offset + 64 * 32 * 4
    assert ModelFiles(shards=(h,)).file_size == h.expected_file_size
    with pytest.raises(IncompleteModelError):
        read_header(plain)
