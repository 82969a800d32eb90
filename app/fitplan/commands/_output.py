"""Output conventions shared by every subcommand: colour, tables, sizes, JSON and errors.

Conventions (see `fitplan --help`):

* results go to stdout, diagnostics and errors to stderr (`error()`, `warn()`);
* exit codes: `EXIT_OK` (0), `EXIT_DOES_NOT_FIT` (1, only where fitting is the question), `EXIT_BAD_INPUT` (2);
* colour only when the stream is a terminal and neither `NO_COLOR` (https://no-color.org) is set nor `TERM=dumb`;
* `--json` prints one JSON document on stdout (`print_json`), no colour, no tables, nothing else on stdout.

Typical use in a handler::

    from fitplan.commands import _output as out

    if args.json:
        out.print_json({"devices": estimate.devices})
        return out.EXIT_OK
    print(out.table(["device", "used"], [[d.device.name, out.size(d.used_bytes)] for d in estimate.devices],
                    align="lr"))
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import enum
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import PurePath
from typing import Any, TextIO

EXIT_OK = 0
EXIT_DOES_NOT_FIT = 1
EXIT_BAD_INPUT = 2

# SGR codes of the few styles the CLI uses.
BOLD = "1"
DIM = "2"
RED = "31"
GREEN = "32"
YELLOW = "33"
CYAN = "36"

_CSI = "\x1b["

#: Characters that must never reach a terminal raw: C0 controls, DEL, C1 controls (0x9b is a one-byte CSI), and the
#: lone surrogates that stand for undecodable bytes of file names (os.fsdecode's surrogateescape).
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
#: What `escape_for_terminal` keeps: line breaks and tabs, and (only on a colour terminal) the SGR colour sequences
#: of `style()`, the only escape sequences fitplan writes.
_KEEP_PLAIN_RE = re.compile("[\n\t]")
_KEEP_COLOUR_RE = re.compile("\x1b\\[[0-9;]*m|[\n\t]")


_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(c: str) -> str:
    if c in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[c]
    code = ord(c)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def clean(text: object) -> str:
    """`text` with every control character (newlines and escape sequences included) and undecodable byte written
    as a visible escape ("\\x1b", "\\n", "\\udcff"): for names, paths and messages that come from files or servers,
    so that they stay on one line and cannot drive the terminal."""
    return _CONTROL_RE.sub(lambda m: _escape_char(m.group()), str(text))


def escape_for_terminal(text: str, keep_colour: bool = False) -> str:
    """Whole output text made safe for a terminal: like `clean`, but keeps newlines and tabs, and with
    `keep_colour` the SGR colour sequences `style()` writes (a name can then at most change a colour)."""
    if text.isprintable():
        return text
    keep = _KEEP_COLOUR_RE if keep_colour else _KEEP_PLAIN_RE
    out: list[str] = []
    pos = 0
    for m in keep.finditer(text):
        out.append(clean(text[pos : m.start()]))
        out.append(m.group())
        pos = m.end()
    out.append(clean(text[pos:]))
    return "".join(out)


def _u_escape(exc: UnicodeError) -> tuple[str, int]:
    """Codec error handler: unencodable characters as \\uXXXX escapes (astral ones as a surrogate pair), which read
    the same in text and are valid inside JSON strings."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = []
    for c in exc.object[exc.start : exc.end]:
        code = ord(c)
        if code > 0xFFFF:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{code:04x}")
    return "".join(out), exc.end


_UESCAPE = "fitplan-uescape"
codecs.register_error(_UESCAPE, _u_escape)


class TerminalSafeStream:
    """A text stream wrapper: every write goes through `escape_for_terminal` (colour kept only when the stream is a
    colour terminal), and characters the stream's encoding cannot hold are written as backslash escapes instead of
    raising UnicodeEncodeError. `raw` is the wrapped stream, for fitplan's own control output (the progress line)."""

    def __init__(self, stream: TextIO) -> None:
        self.raw = stream
        self._colour = use_color(stream)

    def write(self, text: str) -> int:
        safe = escape_for_terminal(text, self._colour)
        try:
            self.raw.write(safe)
        except UnicodeEncodeError:
            enc = getattr(self.raw, "encoding", None) or "ascii"
            self.raw.write(safe.encode(enc, _UESCAPE).decode(enc, "replace"))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def text_encoding() -> str:
    """The encoding stdout writes (under its `TerminalSafeStream`): what an exported command must fit."""
    return getattr(unescaped(sys.stdout), "encoding", None) or "utf-8"


def unescaped(stream: Any) -> Any:
    """The stream under a `TerminalSafeStream` (itself otherwise): for control output fitplan writes itself."""
    return stream.raw if isinstance(stream, TerminalSafeStream) else stream


@contextlib.contextmanager
def safe_streams() -> Iterator[None]:
    """Run a subcommand with stdout and stderr wrapped in `TerminalSafeStream` (restored afterwards)."""
    saved = sys.stdout, sys.stderr
    sys.stdout = TerminalSafeStream(saved[0])
    sys.stderr = TerminalSafeStream(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def use_color(stream: TextIO | None = None) -> bool:
    """True when ANSI colour may be written to `stream` (stdout by default)."""
    stream = sys.stdout if stream is None else stream
    if os.environ.get("NO_COLOR", ""):
        return False
    if os.environ.get("TERM", "") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    if isatty is None or not isatty():
        return False
    if os.name == "nt":
        # Classic consoles print escape codes literally; Windows Terminal and ConEmu/ANSICON render them.
        return any(k in os.environ for k in ("WT_SESSION", "ANSICON", "ConEmuANSI", "TERM"))
    return True


def style(text: str, *codes: str, stream: TextIO | None = None) -> str:
    """`text` wrapped in the SGR `codes` when `use_color(stream)`, else `text` unchanged."""
    if not codes or not use_color(stream):
        return text
    return f"{_CSI}{';'.join(codes)}m{text}{_CSI}0m"


def visible_len(text: str) -> int:
    """Length of `text` on screen, ignoring SGR escape sequences."""
    n = 0
    i = 0
    while i < len(text):
        if text.startswith(_CSI, i):
            end = text.find("m", i)
            if end != -1:
                i = end + 1
                continue
        n += 1
        i += 1
    return n


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    align: str = "",
    gap: int = 2,
    stream: TextIO | None = None,
) -> str:
    """A plain-text table: a bold header line, then one line per row, columns padded to the widest cell.

    `align` holds one letter per column, "l" or "r" (missing letters mean "l"). Cells are `str()`-ed; cells may
    already contain colour from `style()`, which does not count towards the width.
    """
    body = [[_one_line(str(c)) for c in row] for row in rows]
    ncols = max([len(headers), *(len(r) for r in body)])
    head = [*headers, *[""] * (ncols - len(headers))]
    body = [[*r, *[""] * (ncols - len(r))] for r in body]
    widths = [max(visible_len(r[i]) for r in [head, *body]) for i in range(ncols)]
    sep = " " * gap

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            pad = " " * (widths[i] - visible_len(cell))
            out.append(pad + cell if align[i : i + 1] == "r" else cell + pad)
        return sep.join(out).rstrip()

    lines = [style(line(head), BOLD, stream=stream)] if any(head) else []
    lines.extend(line(r) for r in body)
    return "\n".join(lines)


def _one_line(cell: str) -> str:
    """A table cell kept on its line: line breaks (and other controls but colour) escaped."""
    return (
        cell
        if cell.isprintable()
        else escape_for_terminal(cell, True).replace("\n", "\\n").replace("\t", "\\t")
    )


def size(n_bytes: int | float, precision: int = 2) -> str:
    """Binary-prefixed size as llama.cpp prints it: "1.50 GiB", "512.00 MiB", "123 B". Negative sizes keep their sign."""
    sign = "-" if n_bytes < 0 else ""
    value = float(abs(n_bytes))
    if value < 1024:
        return f"{sign}{int(value)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            return f"{sign}{value:.{precision}f} {unit}"
    raise AssertionError("unreachable")


def mib(n_bytes: int | float) -> str:
    """Size in MiB with two decimals, the unit llama.cpp's memory breakdown uses ("1234.56 MiB")."""
    return f"{n_bytes / (1 << 20):.2f} MiB"


def to_jsonable(obj: Any) -> Any:
    """Plain JSON types from dataclasses, enums, paths, mappings and sequences (recursively).

    Dataclasses become objects of their fields (in declaration order); enums their value; paths strings;
    tuples, lists, sets and frozensets lists (sets sorted for stable output); bytes raise TypeError.
    """
    if isinstance(obj, enum.Enum):  # before the scalars: a StrEnum is also a str
        return to_jsonable(obj.value)
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, Mapping):
        return {str(to_jsonable(k)): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, set | frozenset):
        return sorted((to_jsonable(v) for v in obj), key=repr)
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


_JSON_UNSAFE_RE = re.compile("[\x7f-\x9f\ud800-\udfff]")


def dumps_json(obj: Any) -> str:
    """The JSON text `print_json` writes (indented, keys in insertion order, no NaN)."""
    text = json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False, allow_nan=False)
    # json escapes C0 controls itself; DEL, C1 controls and lone surrogates (undecodable file names) become \\u
    # escapes too: valid JSON that a terminal shows as text and every encoding can write
    return _JSON_UNSAFE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def print_json(obj: Any, stream: TextIO | None = None) -> None:
    """Write `obj` as one JSON document (see `to_jsonable`) and a newline to stdout."""
    stream = sys.stdout if stream is None else stream
    stream.write(dumps_json(obj) + "\n")
    stream.flush()


def error(message: str) -> int:
    """Print "fitplan: error: message" on stderr and return `EXIT_BAD_INPUT`, for `return out.error(...)`."""
    print(style("fitplan: error:", RED, BOLD, stream=sys.stderr) + f" {clean(message)}", file=sys.stderr)
    return EXIT_BAD_INPUT


def warn(message: str) -> None:
    """Print "fitplan: warning: message" on stderr."""
    print(style("fitplan: warning:", YELLOW, stream=sys.stderr) + f" {clean(message)}", file=sys.stderr)
