"""`core.gguf.gguf_tables` is gguf-py's tables as the installed gguf-py has them: the file is what
tools/gen_gguf_tables.py writes today, and each value reads the same as in `gguf.constants`."""

from __future__ import annotations

from fitplan.core.gguf import ggml_types, gguf_tables
from gguf import constants as c
from support.tools import load_tool


def test_the_file_is_what_the_generator_writes_from_the_installed_gguf_py() -> None:
    gen = load_tool("tools/gen_gguf_tables.py")
    assert gen.OUT.read_text(encoding="utf-8") == gen.render(), "rerun: python tools/gen_gguf_tables.py"


def _same_keys(ours: type, theirs: type, where: str) -> int:
    n = 0
    for name, value in vars(theirs).items():
        if name.startswith("_"):
            continue
        if isinstance(value, type):
            n += _same_keys(getattr(ours, name), value, f"{where}.{name}")
        else:
            assert getattr(ours, name) == value, f"{where}.{name}"
            n += 1
    return n


def test_every_key_name_is_gguf_py_s() -> None:
    assert _same_keys(gguf_tables.Keys, c.Keys, "Keys") > 200


def test_types_and_file_types_are_gguf_py_s() -> None:
    assert {t.name: int(t) for t in c.GGMLQuantizationType} == {
        k: v for k, v in vars(gguf_tables.GGMLQuantizationType).items() if not k.startswith("_")
    }
    assert [(int(t), t.name, *c.GGML_QUANT_SIZES[t]) for t in c.GGML_QUANT_SIZES] == list(
        gguf_tables.GGML_TYPES
    )
    assert [(int(t), t.name) for t in c.LlamaFileType] == list(gguf_tables.FILE_TYPES)
    for t, (blck, size) in c.GGML_QUANT_SIZES.items():
        mine = ggml_types.lookup(int(t))
        assert mine is not None and (mine.name, mine.block_size, mine.type_size) == (t.name, blck, size)
    assert ggml_types.file_type_label(int(c.LlamaFileType.MOSTLY_Q4_K_M)) == "Q4_K_M"
    assert ggml_types.file_type_label(int(c.LlamaFileType.ALL_F32) | 1024) == "F32 (guessed)"
