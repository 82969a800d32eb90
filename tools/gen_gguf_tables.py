#!/usr/bin/env python3
"""Write `app/fitplan/core/gguf/gguf_tables.py`: the few gguf-py tables fitplan reads, as plain Python.

`gguf.constants` builds a few hundred enums and dictionaries when it is imported, about 20 ms of every start of
`fitplan plan`, for the metadata key names, the ggml type sizes and the file-type names. This copies those from the
installed gguf-py; `tests/gguf/test_gguf_tables.py` renders them again and fails when the file differs, so a new
gguf-py release is one rerun of this script.

    python tools/gen_gguf_tables.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "app" / "fitplan" / "core" / "gguf" / "gguf_tables.py"


def _q(text: str) -> str:
    """A string literal as ruff format writes it."""
    return json.dumps(text)


def _class_lines(name: str, cls: type, indent: str) -> list[str]:
    lines = [f"{indent}class {name}:"]
    after_class = False
    for attr, value in vars(cls).items():
        if attr.startswith("_"):
            continue
        if isinstance(value, type):
            if len(lines) > 1:
                lines.append("")
            lines += _class_lines(attr, value, indent + "    ")
            after_class = True
            continue
        if not isinstance(value, str):
            raise SystemExit(f"Keys.{name}.{attr}: a {type(value).__name__}, not a string")
        if after_class:
            lines.append("")
        lines.append(f"{indent}    {attr} = {_q(value)}")
        after_class = False
    return lines


def render() -> str:
    """The module's text from the installed gguf-py."""
    from gguf import constants as c

    version = metadata.version("gguf")
    types = [(int(t), t.name, blck, size) for t, (blck, size) in c.GGML_QUANT_SIZES.items()]
    lines = [
        f'"""gguf-py {version}\'s tables that fitplan reads (`gguf.constants`), written by tools/gen_gguf_tables.py.',
        "",
        "Importing `gguf.constants` builds a few hundred enums and tables, a tenth of the start of `fitplan plan`;",
        "these are the metadata key names (`Keys`), the ggml types with their block and type sizes, and the file",
        "types, as plain values. tests/gguf/test_gguf_tables.py checks the file against the installed gguf-py.",
        "Do not edit: run the script.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        '__all__ = ["FILE_TYPES", "GGML_TYPES", "GGMLQuantizationType", "Keys"]',
        "",
        "#: (id, name, elements per block, bytes per block): `GGML_QUANT_SIZES` in its order, named by `GGMLQuantizationType`",
        "GGML_TYPES: tuple[tuple[int, str, int, int], ...] = (",
        *(f"    ({i}, {_q(n)}, {b}, {s})," for i, n, b, s in types),
        ")",
        "",
        "#: (value, name) of each `LlamaFileType`",
        "FILE_TYPES: tuple[tuple[int, str], ...] = (",
        *(f"    ({int(t)}, {_q(t.name)})," for t in c.LlamaFileType),
        ")",
        "",
        "",
        "class GGMLQuantizationType:",
        '    """The ggml type ids by name (`gguf.constants.GGMLQuantizationType`), as ints."""',
        "",
        *(f"    {t.name} = {int(t)}" for t in c.GGMLQuantizationType),
        "",
        "",
        *_class_lines("Keys", c.Keys, ""),
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail when the file differs instead of writing it")
    args = ap.parse_args()
    text = render()
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print(
            f"{OUT.name}: {'up to date' if same else 'differs from the installed gguf-py: rerun without --check'}"
        )
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
