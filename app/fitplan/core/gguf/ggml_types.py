"""The ggml tensor types: id, name, block size, bytes per block, and how many bytes a tensor of a given shape takes.

Source of truth for mainline types is llama.cpp's gguf-py (`gguf.constants.GGML_QUANT_SIZES`, copied into
`gguf_tables`). The targeted build
(llama.cpp b11434, ggml/include/ggml.h) also has Q2_0 (id 42, `block_q2_0` = fp16 scale + 64 2-bit values = 18 bytes
per 64 weights), which the bundled gguf-py release does not list yet; it is added here.

ik_llama.cpp adds its own types (ids 97-99, 133-158, 2xx/3xx repacked variants) and reuses some ids mainline dropped
(31-33 Q4_0_4_4/4_8/8_8, 36 I2_S) or assigned differently (41 is Q1_0_G128 in ik, Q1_0 in mainline, same sizes).
Several ik types carry per-row metadata ("row_meta" bytes, ik's `type_traits[t].row_meta_size`), so their row size is
`row_meta + type_size * ne0 / block_size` (ik `ggml_row_size`). Values: ik_llama.cpp ggml/src/ggml.c type_traits and
ggml/src/ggml-common.h block structs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from fitplan.core.gguf.gguf_tables import FILE_TYPES, GGML_TYPES


@dataclass(frozen=True, slots=True)
class GGMLType:
    id: int
    name: str  # upper-case, as gguf-py and llama.cpp's logs print it ("Q4_K", "F16")
    block_size: int  # elements per block
    type_size: int  # bytes per block
    row_meta: int = 0  # bytes of per-row metadata (ik_llama.cpp types only)
    ik_only: bool = False  # defined by ik_llama.cpp, not by mainline llama.cpp

    @property
    def quantized(self) -> bool:
        return self.block_size > 1

    @property
    def bits_per_weight(self) -> float:
        """Bits per weight of a long row (row metadata amortised away)."""
        return 8.0 * self.type_size / self.block_size


def _mainline_types() -> dict[int, GGMLType]:
    table: dict[int, GGMLType] = {}
    for qt, name, blck, size in GGML_TYPES:
        table[qt] = GGMLType(qt, name, blck, size)
    # llama.cpp b11434 ggml.h: GGML_TYPE_Q2_0 = 42; ggml-common.h: QK2_0 64, block = ggml_half + 64/4 bytes = 18.
    table.setdefault(42, GGMLType(42, "Q2_0", 64, 18))
    return table


# (id, name, block size, type size, row meta) from ik_llama.cpp ggml.h / ggml.c type_traits (QK_K = 256).
_IK_TYPES: tuple[tuple[int, str, int, int, int], ...] = (
    (31, "Q4_0_4_4", 32, 18, 0),
    (32, "Q4_0_4_8", 32, 18, 0),
    (33, "Q4_0_8_8", 32, 18, 0),
    (36, "I2_S", 1, 1, 0),  # ik ggml_nbytes: n_elements / 4 + 32 (see nbytes)
    (41, "Q1_0_G128", 128, 18, 0),
    (133, "Q6_0", 32, 26, 0),
    (134, "IQ1_BN", 64, 13, 2),
    (135, "IQ2_BN", 64, 16, 4),
    (137, "IQ2_K", 256, 76, 0),
    (138, "IQ3_K", 256, 110, 0),
    (139, "IQ4_K", 256, 144, 0),
    (140, "IQ5_K", 256, 176, 0),
    (141, "IQ6_K", 256, 212, 0),
    (144, "IQ4_KS", 256, 136, 4),
    (145, "IQ2_KS", 256, 70, 2),
    (146, "IQ4_KSS", 256, 128, 4),
    (151, "Q8_KV", 32, 32, 8),
    (152, "IQ5_KS", 256, 168, 4),
    (153, "IQ2_KT", 256, 68, 4),
    (154, "IQ3_KT", 256, 100, 4),
    (155, "IQ4_KT", 256, 128, 4),
    (156, "IQ3_KS", 256, 102, 2),
    (157, "IQ2_KL", 256, 86, 2),
    (158, "IQ1_KT", 256, 56, 4),
    # Repacked variants: same block layout as their base type unless noted.
    (202, "Q4_0_R8", 32, 18, 0),
    (206, "Q5_0_R4", 32, 22, 0),
    (208, "Q8_0_R8", 32, 34, 0),
    (210, "Q2_K_R4", 256, 84, 0),
    (211, "Q3_K_R4", 256, 110, 0),
    (212, "Q4_K_R4", 256, 144, 0),
    (213, "Q5_K_R4", 256, 176, 0),
    (214, "Q6_K_R4", 256, 210, 0),
    (216, "IQ2_XXS_R4", 256, 66, 0),
    (217, "IQ2_XS_R4", 256, 74, 0),
    (218, "IQ3_XXS_R4", 256, 98, 0),
    (219, "IQ1_S_R4", 32, 6, 2),
    (220, "IQ4_NL_R4", 32, 18, 0),
    (221, "IQ3_S_R4", 256, 110, 0),
    (222, "IQ2_S_R4", 256, 82, 0),
    (223, "IQ4_XS_R8", 256, 136, 0),
    (229, "IQ1_M_R4", 32, 7, 2),
    (230, "BF16_R16", 1, 2, 0),
    (233, "Q6_0_R4", 32, 26, 0),
    (335, "IQ2_BN_R4", 64, 16, 4),
    (337, "IQ2_K_R4", 256, 76, 0),
    (338, "IQ3_K_R4", 256, 110, 0),
    (339, "IQ4_K_R4", 256, 144, 0),
    (340, "IQ5_K_R4", 256, 176, 0),
    (344, "IQ4_KS_R4", 256, 136, 4),
    (352, "IQ5_KS_R4", 256, 168, 4),
    (353, "MXFP4_R8", 32, 17, 0),
    (397, "Q8_K_R16", 256, 258, 0),
    (398, "Q8_KV_R8", 32, 32, 4),
    (399, "Q8_K_R8", 256, 258, 0),
)

I2_S_ID = 36

#: Mainline llama.cpp types (the targeted build).
MAINLINE_TYPES: Mapping[int, GGMLType] = MappingProxyType(_mainline_types())
#: ik_llama.cpp's own types and its readings of ids mainline leaves unused or uses differently.
IK_TYPES: Mapping[int, GGMLType] = MappingProxyType(
    {i: GGMLType(i, n, b, s, m, ik_only=True) for i, n, b, s, m in _IK_TYPES}
)
#: ids that only ik_llama.cpp defines: a file holding a tensor of such a type is an ik_llama.cpp file.
IK_ONLY_IDS: frozenset[int] = frozenset(set(IK_TYPES) - set(MAINLINE_TYPES))


def lookup(type_id: int, *, ik: bool = False) -> GGMLType | None:
    """The type for an id. With `ik`, ids both engines define resolve to ik_llama.cpp's meaning."""
    if ik:
        return IK_TYPES.get(type_id) or MAINLINE_TYPES.get(type_id)
    return MAINLINE_TYPES.get(type_id) or IK_TYPES.get(type_id)


def get_type(type_id: int, *, ik: bool = False) -> GGMLType:
    t = lookup(type_id, ik=ik)
    if t is None:
        raise ValueError(f"unknown ggml type id {type_id}")
    return t


def is_ik_file(type_ids: Iterable[int]) -> bool:
    """Whether tensors of these types can only come from ik_llama.cpp."""
    return any(t in IK_ONLY_IDS for t in type_ids)


def type_name(type_id: int, *, ik: bool = False) -> str:
    t = lookup(type_id, ik=ik)
    return t.name if t is not None else f"TYPE_{type_id}"


_BY_NAME: dict[str, int] = {}
for _t in (*IK_TYPES.values(), *MAINLINE_TYPES.values()):  # mainline last: it wins on shared names
    _BY_NAME[_t.name.upper()] = _t.id


def type_id(name: str) -> int:
    """Id of a type name, case-insensitive ("q4_k", "F16", "iq4_ks")."""
    try:
        return _BY_NAME[name.upper()]
    except KeyError:
        raise ValueError(f"unknown ggml type name {name!r}") from None


#: the cache types whose K/V cells are plain floats: every other cache type is a block (quantized) type
FLOAT_CACHE_TYPES = frozenset({"f32", "f16", "bf16"})


def is_quantized_cache_type(name: str) -> bool:
    """Whether a K/V cache type (-ctk/-ctv, any engine's: "q8_0", ik's "q8_kv", beellama's "kvarn4") stores
    quantized blocks, not plain floats: the one rule for "a quantized cache" (flash attention required for V, the
    f16 copies of the attention, the accuracy classes)."""
    return name.lower() not in FLOAT_CACHE_TYPES


def row_size(type_id: int, n: int, *, ik: bool = False, check: bool = True) -> int:
    """Bytes of one row of `n` elements (`ggml_row_size`). `n` must be a multiple of the block size unless
    `check` is off (ggml's own integer arithmetic, used for padding rows)."""
    t = get_type(type_id, ik=ik)
    if check and n % t.block_size:
        raise ValueError(f"{t.name}: row length {n} is not a multiple of the block size {t.block_size}")
    return t.row_meta + t.type_size * n // t.block_size


def nbytes(type_id: int, shape: Iterable[int], *, ik: bool = False) -> int:
    """Bytes of a contiguous tensor (`ggml_nbytes`); shape is ne0 first. A dimension <= 0 means an empty tensor."""
    dims = tuple(shape)
    if not dims:
        dims = (1,)
    if any(d <= 0 for d in dims):
        return 0
    rows = 1
    for d in dims[1:]:
        rows *= d
    if type_id == I2_S_ID and lookup(type_id, ik=ik) is IK_TYPES.get(I2_S_ID):
        # ik_llama.cpp ggml_nbytes "hack for I2_S": 2-bit values plus a 32-byte scale block.
        return dims[0] * rows // 4 + 32
    return row_size(type_id, dims[0], ik=ik) * rows


def _file_type_labels() -> dict[int, str]:
    labels: dict[int, str] = {}
    for value, name in FILE_TYPES:
        if name == "GUESSED":
            continue
        labels[value] = "F32" if name == "ALL_F32" else name.removeprefix("MOSTLY_")
    # llama.cpp b11434 include/llama.h: LLAMA_FTYPE_MOSTLY_Q2_0 = 41.
    labels.setdefault(41, "Q2_0")
    return labels


#: general.file_type value -> label ("Q4_K_M"), as llama.cpp's llama_ftype names them.
FILE_TYPE_LABELS: Mapping[int, str] = MappingProxyType(_file_type_labels())
FILE_TYPE_GUESSED = 1024


def file_type_label(file_type: int) -> str:
    """Label of a general.file_type value; "(guessed)" is appended when llama.cpp's GUESSED bit is set."""
    guessed = bool(file_type & FILE_TYPE_GUESSED)
    base = file_type & ~FILE_TYPE_GUESSED
    label = FILE_TYPE_LABELS.get(base, f"unknown file type {base}")
    return f"{label} (guessed)" if guessed else label


def quant_mix(type_bytes: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """(type name, bytes) summed per type, most bytes first (ties by name)."""
    by_type: dict[str, int] = {}
    for name, n in type_bytes:
        by_type[name] = by_type.get(name, 0) + n
    return tuple(sorted(by_type.items(), key=lambda kv: (-kv[1], kv[0])))


def model_file_type(file_type: object, mix: Sequence[tuple[str, int]]) -> str:
    """A model's quantization label: general.file_type as llama.cpp names it, else the type holding most bytes."""
    if isinstance(file_type, int) and not isinstance(file_type, bool):
        return file_type_label(file_type)
    return mix[0][0] if mix else ""
