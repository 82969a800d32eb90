"""Quote an argv for POSIX sh, PowerShell and cmd.exe, and split pasted command lines of each back into argv.

Rendering is conservative: a word is left bare only when it is made of characters that mean nothing to the shell;
everything else is quoted in the one form of that shell that is literal, or refused (`ShellSyntaxError`):

* every shell: an argument must be one line of printable text. Control characters (C0 but tab, DEL, C1), line and
  paragraph separators and bidirectional-text controls are refused: they would reach the terminal raw, or make the
  command read differently from what runs.
* sh: single quotes (`'` written as `'"'"'`). A word starting with `=` is quoted (zsh expands `=cmd` to a path), and
  so is a program named like a reserved word (`if`, `time`, `!` ...).
* PowerShell: single quotes, every single-quote character doubled (PowerShell also treats the typographic quotes
  U+2018..U+201B as single quotes). A bare word starting with a dash must be a plain flag (`-ngl`, `--n-cpu-moe`):
  PowerShell splits `-m.gguf` at its first "." and reads `-a:b` as a parameter with an argument. A program path that
  needs quotes is called through `&`.
* cmd.exe: the argument is first quoted for the program's own splitting (CommandLineToArgvW rules: quotes around
  words with blanks, `\\"` for a quote, backslashes doubled before a quote). A quoted word with no quote or `%` inside
  is left as it is (cmd.exe treats nothing else inside quotes); otherwise every cmd metacharacter
  `( ) ! ^ " < > & |` is escaped with `^`, so cmd never sees an unescaped quote and passes the text on unchanged.
  `%` expansion runs before `^` is read, so `^%PATH:a=b^%` still expands PATH: instead a `^` goes right after each
  `%`, so that every `%name%` cmd could look up starts with `^` and names no variable (the caret is removed later).
  `!` is refused: with delayed expansion on it needs `^^!`, with it off `^!`, and fitplan cannot know which. This is
  the interactive prompt's form: inside a .bat file `%` must be doubled instead. Line breaks and carriage returns
  cannot be passed through cmd.exe at all.

Caveat for PowerShell 5.1 (Windows PowerShell): when it passes arguments on to a native program it drops empty
arguments and mangles embedded double quotes (fixed in PowerShell 7.3, `$PSNativeCommandArgumentPassing`). The
rendering is exact at the PowerShell language level; llama-server arguments rarely need either.

Splitting implements the rules a pasted command needs: quotes, escapes, line continuations (`\\` in sh, a backtick
in PowerShell, `^` in cmd), comments, and statement separators (newline, `;`, `&&`, `|` ...), so a paste such as
`$env:CUDA_VISIBLE_DEVICES=0; llama-server ...` splits into two commands. Variables are never expanded: `$HOME` or
`%USERPROFILE%` stay as written.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from enum import StrEnum

from fitplan.core.base.errors import FitplanError, FlagError
from fitplan.core.base.numbers import int_or_none, is_digits

__all__ = [
    "Shell",
    "ShellSyntaxError",
    "check_printable",
    "default_shell",
    "detect_shell",
    "join",
    "join_many",
    "powershell_literal",
    "quote",
    "split",
    "split_commands",
    "split_windows_command_line",
    "unsafe_character",
]


class Shell(StrEnum):
    SH = "sh"
    POWERSHELL = "powershell"
    CMD = "cmd"


class ShellSyntaxError(FlagError):
    """A command line that cannot be split (an unterminated quote), or an argument a shell cannot carry."""


def default_shell(platform: str | None = None) -> Shell:
    """PowerShell on Windows (the default terminal there), sh everywhere else."""
    plat = sys.platform if platform is None else platform
    return Shell.POWERSHELL if plat.startswith("win") else Shell.SH


# --------------------------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------------------------

_SH_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_SH_SAFE_PROGRAM = re.compile(r"[A-Za-z0-9_@%+:,./-]+")  # no "=": a first word with "=" is an assignment

#: PowerShell's single-quote characters (System.Management.Automation.Language.CharExtensions.IsSingleQuote).
_PS_SINGLE_QUOTES = frozenset("'\u2018\u2019\u201a\u201b")
#: PowerShell's double-quote characters (IsDoubleQuote).
_PS_DOUBLE_QUOTES = frozenset('"\u201c\u201d\u201e')
# A bare PowerShell argument: ASCII only, and it must not start like a number (argument mode converts `1e3`, `0x10`,
# `007`, `1kb` to numbers), a variable, an operator or a type literal. Plain integers are kept bare.
_PS_SAFE = re.compile(
    r"(?:[A-Za-z_/\\]|\.[A-Za-z_/\\.])[A-Za-z0-9_./\\:=+-]*|--?[A-Za-z][A-Za-z0-9_-]*|0|-?[1-9][0-9]*|\."
)

#: Characters cmd.exe interprets on its command line; each is escaped with `^` (`%` gets one after it instead).
_CMD_META = frozenset('()%!^"<>&|')
#: cmd.exe's longest command line (8,191 characters, after expansion): a longer one is refused, not cut.
CMD_MAX_LINE = 8191
#: Characters that end cmd.exe's command word as a blank does (its token delimiters).
_CMD_DELIMITERS = frozenset(" \t;,=\x0b\x0c\xa0")
#: cmd.exe's internal commands: an unquoted first word that starts with one of these (`echo.exe`, `dir/w`, `cd..`)
#: runs the internal command, never a program file of that name.
_CMD_INTERNAL = re.compile(
    r"(?i)(assoc|break|call|cd|chdir|cls|color|copy|date|del|dir|dpath|echo|endlocal|erase|exit|for|ftype|goto|"
    r"if|keys|md|mkdir|mklink|move|path|pause|popd|prompt|pushd|rd|rem|ren|rename|rmdir|set|setlocal|shift|start|"
    r"time|title|type|ver|verify|vol)(?:[^A-Za-z0-9_\-]|$)"
)
#: PowerShell's language keywords (about_Language_Keywords): in the program's place each starts a statement.
_PS_KEYWORDS = frozenset(
    [
        "begin",
        "break",
        "catch",
        "class",
        "clean",
        "configuration",
        "continue",
        "data",
        "define",
        "do",
        "dynamicparam",
        "else",
        "elseif",
        "end",
        "enum",
        "exit",
        "filter",
        "finally",
        "for",
        "foreach",
        "from",
        "function",
        "hidden",
        "if",
        "in",
        "inlinescript",
        "parallel",
        "param",
        "process",
        "return",
        "sequence",
        "static",
        "switch",
        "throw",
        "trap",
        "try",
        "until",
        "using",
        "var",
        "while",
        "workflow",
    ]
)


#: Words sh, bash and zsh read as reserved in the program's place (quoted there, they are plain words).
_SH_RESERVED = frozenset(
    [
        "!",
        "{",
        "}",
        "[[",
        "]]",
        "case",
        "coproc",
        "do",
        "done",
        "elif",
        "else",
        "end",
        "esac",
        "fi",
        "for",
        "foreach",
        "function",
        "if",
        "in",
        "nocorrect",
        "noglob",
        "repeat",
        "select",
        "then",
        "time",
        "until",
        "while",
    ]
)


def _quote_sh(arg: str, program: bool) -> str:
    bare = (_SH_SAFE_PROGRAM if program else _SH_SAFE).fullmatch(arg)
    # a program word starting with "-" is zsh's precommand modifier `-`; one starting with "%" is a job in bash
    # and zsh (`%1` runs `fg %1`): both are quoted
    if (
        bare
        and not arg.startswith("=")
        and not (program and (arg in _SH_RESERVED or arg.startswith(("-", "%"))))
    ):
        return arg
    return "'" + arg.replace("'", "'\"'\"'") + "'"


#: Bidirectional-text controls (ALM, LRM, RLM, embeddings, overrides, isolates): text that displays reordered.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def unsafe_character(text: str) -> str | None:
    """The first character of `text` that fitplan never writes into a command, preset or Modelfile (a control
    character other than tab, a line or paragraph separator, a bidirectional-text control), or None."""
    for ch in text:
        o = ord(ch)
        if (o < 0x20 and ch != "\t") or 0x7F <= o <= 0x9F or ch in "\u2028\u2029" or ch in _BIDI:
            return ch
    return None


def check_printable(text: str, what: str) -> None:
    """Refuse `text` (one line of `what`) when it holds a character `unsafe_character` finds."""
    if "\x00" in text:
        raise ShellSyntaxError(f"{what} cannot contain a NUL character")
    ch = unsafe_character(text)
    if ch is not None:
        raise ShellSyntaxError(
            f"{what} holds the control character U+{ord(ch):04X}, which fitplan does not write into a command: "
            f"{ascii(text)[:80]}"
        )


def _quote_ps(arg: str) -> str:
    if _PS_SAFE.fullmatch(arg) and arg != ".":
        return arg
    return powershell_literal(arg)


def powershell_literal(arg: str) -> str:
    out = ["'"]
    for ch in arg:
        out.append(ch + ch if ch in _PS_SINGLE_QUOTES else ch)
    out.append("'")
    return "".join(out)


def _quote_argv_w(arg: str) -> str:
    """Quote one argument so that CommandLineToArgvW (and the MSVC runtime) gives it back unchanged."""
    if arg and not any(c in arg for c in ' \t"\v\n'):
        return arg
    out = ['"']
    backslashes = 0
    for ch in arg:
        if ch == "\\":
            backslashes += 1
            continue
        if ch == '"':
            out.append("\\" * (2 * backslashes + 1) + '"')
        else:
            out.append("\\" * backslashes + ch)
        backslashes = 0
    out.append("\\" * (2 * backslashes) + '"')
    return "".join(out)


def _escape_cmd(text: str) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch != "%":
            out.append("^" + ch if ch in _CMD_META else ch)
            continue
        nxt = text[i + 1 : i + 2]
        # %^name: the name cmd's %-expansion would look up starts with ^ (none does); a following metacharacter
        # brings its own caret, and a name starting with a blank names no variable either
        # a variable name may start with a blank (`set " x=1"` defines " x"), so a blank gets the caret too
        out.append("%" if not nxt or (nxt in _CMD_META and nxt != "%") else "%^")
    return "".join(out)


def _check_cmd(arg: str) -> None:
    if "\n" in arg or "\r" in arg:
        raise ShellSyntaxError(
            f"cmd.exe cannot pass an argument that contains a line break: {ascii(arg)[:80]}"
        )
    if "!" in arg:
        raise ShellSyntaxError(
            f"cmd.exe cannot pass '!' the same way with and without delayed expansion: {ascii(arg)[:80]} "
            "(use PowerShell)"
        )


def quote(arg: str, shell: Shell | str, *, program: bool = False) -> str:
    """One argument quoted for `shell`; `program=True` for the first word (the program itself)."""
    sh = Shell(shell)
    if sh is Shell.CMD:
        _check_cmd(arg)
    check_printable(arg, "an argument")
    if sh is Shell.SH:
        return _quote_sh(arg, program)
    if sh is Shell.POWERSHELL:
        if program and (not re.match(r"[A-Za-z_./\\]", arg) or arg.lower() in _PS_KEYWORDS):
            return powershell_literal(arg)
        return _quote_ps(arg)
    if program:
        if '"' in arg:
            raise ShellSyntaxError(f"a program path cannot contain a double quote: {ascii(arg)[:80]}")
        if (
            not arg
            or any(c in _CMD_DELIMITERS for c in arg)
            or arg.startswith(("@", ":"))
            or _CMD_INTERNAL.match(arg)
        ):
            if "%" not in arg:
                return f'"{arg}"'
            return _escape_cmd(f'"{arg}"')
        return _escape_cmd(arg)
    word = _quote_argv_w(arg)
    if word.startswith('"') and '"' not in word[1:-1] and "%" not in word:
        return word  # inside cmd.exe's quotes only % (and !, refused) would still be special
    return _escape_cmd(word)


def file_writing_lines(name: str, lines: Sequence[str], shell: Shell | str) -> tuple[str, ...]:
    """The commands that write `lines` to the file `name` in `shell`: a quoted here-document (sh), a literal
    here-string (PowerShell), or `echo(` lines with every metacharacter escaped (cmd.exe). Each line must be
    printable text (`check_printable`), and what would end the here-document early is refused."""
    sh = Shell(shell)
    check_exact_text(lines)
    for line in lines:
        check_printable(line, f"a line of {name}")
    target = quote(name, sh)
    if sh is Shell.SH:
        if "EOF" in lines:
            raise ShellSyntaxError(f"a line of {name} is the here-document's end marker EOF")
        return (f"cat > {target} <<'EOF'", *lines, "EOF")
    if sh is Shell.POWERSHELL:
        if any(line.startswith("'@") for line in lines):
            raise ShellSyntaxError(f"a line of {name} starts with '@, which would end the here-string")
        return ("@'", *lines, f"'@ | Set-Content {target}")
    for line in lines:
        _check_cmd(line)
    return tuple(
        f"{'>' if i == 0 else '>>'} {target} echo({_escape_cmd(line)}" for i, line in enumerate(lines)
    )


_CONTINUATION = {Shell.SH: " \\", Shell.POWERSHELL: " `", Shell.CMD: " ^"}


def check_exact_text(argv: Sequence[str], encoding: str = "utf-8") -> None:
    """Refuse an argument that holds bytes that are not text (a file name's undecodable bytes, kept by Python as
    lone surrogates), or characters the output's `encoding` cannot write (an ASCII-only terminal): either could be
    shown only escaped, and the escaped form names another file. `--json` keeps them exactly (its `argv`)."""
    for arg in argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ShellSyntaxError(
                f"{ascii(arg)[:80]} holds bytes that are not UTF-8 text ({arg[exc.start : exc.end]!a}), so no "
                "command written as text runs it; the exact argv is in --json output, or rename the file"
            ) from None
        try:
            arg.encode(encoding)
        except UnicodeEncodeError as exc:
            raise ShellSyntaxError(
                f"{ascii(arg)[:80]} holds {arg[exc.start : exc.end]!a}, which this terminal's encoding "
                f"({encoding}) cannot write, so the command shown would not run it; use a UTF-8 locale or --json"
            ) from None
        except LookupError:
            pass  # an encoding Python does not know: nothing more to check


def join(
    argv: Sequence[str],
    shell: Shell | str,
    *,
    multiline: bool = False,
    indent: str = "  ",
    exact_text: bool | str = True,
) -> str:
    """The command line for `argv` in `shell`. `multiline=True` starts each flag (a word beginning with `-`) on a
    new line, joined with the shell's line continuation. With `exact_text` (text a person pastes; a string names
    the encoding it is written in) an argument that is not text is refused (`check_exact_text`); a JSON document
    passes False: its escapes decode back exactly."""
    sh = Shell(shell)
    if not argv:
        return ""
    if exact_text:
        check_exact_text(argv, exact_text if isinstance(exact_text, str) else "utf-8")
    words = [quote(argv[0], sh, program=True)]
    if sh is Shell.POWERSHELL and words[0] != argv[0]:
        words[0] = "& " + words[0]
    words.extend(quote(a, sh) for a in argv[1:])
    if sh is Shell.CMD and sum(len(w) + 1 for w in words) - 1 > CMD_MAX_LINE:
        raise ShellSyntaxError(
            f"the command is longer than cmd.exe's {CMD_MAX_LINE} characters per line (use PowerShell)"
        )
    if not multiline:
        return " ".join(words)
    lines: list[list[str]] = [[words[0]]]
    for raw, word in zip(argv[1:], words[1:], strict=True):
        if raw.startswith("-") and len(raw) > 1:
            lines.append([word])
        else:
            lines[-1].append(word)
    cont = _CONTINUATION[sh]
    return (cont + "\n" + indent).join(" ".join(line) for line in lines)


# --------------------------------------------------------------------------------------------------------------------
# Splitting
# --------------------------------------------------------------------------------------------------------------------


class _Commands:
    """Accumulates words into commands while a tokenizer walks the text."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, ...]] = []
        self.words: list[str] = []
        self.buf: list[str] = []
        self.in_word = False
        self.skip_next_word = False  # the target of a redirection

    def add(self, text: str) -> None:
        self.buf.append(text)
        self.in_word = True

    def end_word(self) -> None:
        if self.in_word:
            if self.skip_next_word:
                self.skip_next_word = False
            else:
                self.words.append("".join(self.buf))
        self.buf = []
        self.in_word = False

    def redirect(self, has_target: bool) -> None:
        """`>` or `<`: a pending all-digit word is a file-descriptor number; the next word is the target."""
        if self.in_word and is_digits("".join(self.buf)):
            self.buf = []
            self.in_word = False
        self.end_word()
        self.skip_next_word = has_target

    def end_command(self) -> None:
        self.end_word()
        self.skip_next_word = False
        if self.words:
            self.commands.append(tuple(self.words))
        self.words = []


def _skip_redirect_or_comment(text: str, i: int, acc: _Commands) -> int | None:
    """The index after a redirection or `#` comment at `i` (read alike by both shells), or None for neither."""
    if text[i] in "<>":
        return _redirect(text, i, acc)
    if text[i] == "#" and not acc.in_word:
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    return None


def _redirect(text: str, i: int, acc: _Commands) -> int:
    """A redirection at `i` (`>`, `>>`, `2>&1`, `<`): drop it and its target; returns the index after it."""
    n = len(text)
    i += 1
    while i < n and text[i] == ">":
        i += 1
    if i < n and text[i] == "&":
        i += 1
        while i < n and (is_digits(text[i]) or text[i] == "-"):
            i += 1
        acc.redirect(has_target=False)
        return i
    acc.redirect(has_target=True)
    return i


def _sh_backslash(text: str, i: int, acc: _Commands) -> int:
    """A backslash outside quotes at `i`: a line continuation, or the next character taken literally."""
    n = len(text)
    if text.startswith("\r\n", i + 1):
        return i + 3
    if i + 1 < n and text[i + 1] == "\n":
        return i + 2
    if i + 1 < n:
        acc.add(text[i + 1])
        return i + 2
    return i + 1


def _sh_double(text: str, i: int, acc: _Commands) -> int:
    """A double-quoted string from `text[i]` (the quote): backslash escapes only `$`, `` ` ``, `"`, `\\` and a line
    break. Returns the index after the closing quote."""
    n = len(text)
    i += 1
    acc.add("")
    while True:
        if i >= n:
            raise ShellSyntaxError("unterminated double quote")
        d = text[i]
        if d == '"':
            return i + 1
        if d == "\\" and i + 1 < n:
            e = text[i + 1]
            if e == "\n":
                i += 2
                continue
            if e == "\r" and text.startswith("\n", i + 2):
                i += 3
                continue
            if e in '$`"\\':
                acc.add(e)
                i += 2
                continue
        acc.add(d)
        i += 1


def _sh_quoted(text: str, i: int, acc: _Commands) -> int | None:
    """A quoted string at `i` (`'...'`, `$'...'`, `"..."`): the index after it, or None when none starts there."""
    c = text[i]
    if c == "'":
        end = text.find("'", i + 1)
        if end < 0:
            raise ShellSyntaxError("unterminated single quote")
        acc.add(text[i + 1 : end])
        return end + 1
    if c == "$" and text.startswith("'", i + 1):
        return _sh_ansi_c(text, i + 2, acc)
    if c == '"':
        return _sh_double(text, i, acc)
    return None


def _split_sh(text: str) -> tuple[tuple[str, ...], ...]:
    acc = _Commands()
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i = _sh_backslash(text, i, acc)
            continue
        quoted = _sh_quoted(text, i, acc)
        if quoted is not None:
            i = quoted
            continue
        if c in " \t\r":
            acc.end_word()
            i += 1
            continue
        if c in "\n;&|":
            acc.end_command()
            i += 1
            continue
        skipped = _skip_redirect_or_comment(text, i, acc)
        if skipped is not None:
            i = skipped
            continue
        acc.add(c)
        i += 1
    acc.end_command()
    return tuple(acc.commands)


_ANSI_C = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "v": "\v",
}


def _sh_ansi_c(text: str, i: int, acc: _Commands) -> int:
    """bash's `$'...'`: backslash escapes, otherwise literal. Returns the index after the closing quote."""
    n = len(text)
    acc.add("")
    while i < n:
        c = text[i]
        if c == "'":
            return i + 1
        if c == "\\" and i + 1 < n:
            e = text[i + 1]
            if e in _ANSI_C:
                acc.add(_ANSI_C[e])
            elif e in "\\'\"?":
                acc.add(e)
            else:
                acc.add("\\" + e)
            i += 2
            continue
        acc.add(c)
        i += 1
    raise ShellSyntaxError("unterminated $'...' quote")


_PS_ESCAPES = {
    "0": "\x00",
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}


def _ps_escape(text: str, i: int) -> tuple[str, int]:
    """The character a backtick at `i` escapes, and the index after it."""
    e = text[i + 1]
    if e in _PS_ESCAPES:
        return _PS_ESCAPES[e], i + 2
    if e == "u" and text.startswith("{", i + 2):
        end = text.find("}", i + 3)
        if end > 0:
            code = int_or_none(text[i + 3 : end], 0, sys.maxunicode, base=16)
            if code is not None:
                return chr(code), end + 1
    return e, i + 2


def _ps_quoted(text: str, i: int, acc: _Commands, quotes: frozenset[str], kind: str) -> int:
    """Add the string quoted from `text[i]` to the current word; returns the index after its closing quote.

    A doubled quote stands for one; inside double quotes (`kind` "double") a backtick escapes.
    """
    n = len(text)
    i += 1
    acc.add("")
    while True:
        if i >= n:
            raise ShellSyntaxError(f"unterminated {kind} quote")
        d = text[i]
        if d in quotes:
            if i + 1 < n and text[i + 1] in quotes:
                acc.add(text[i + 1])
                i += 2
                continue
            return i + 1
        if kind == "double" and d == "`" and i + 1 < n:
            ch, i = _ps_escape(text, i)
            acc.add(ch)
            continue
        acc.add(d)
        i += 1


def _ps_backtick(text: str, i: int, acc: _Commands) -> int:
    """A backtick at `i`: a line continuation (the word ends), or an escaped character. Returns the next index."""
    if i + 1 >= len(text):
        return i + 1
    if text[i + 1] == "\n" or text.startswith("\r\n", i + 1):
        acc.end_word()
        return i + (2 if text[i + 1] == "\n" else 3)
    ch, i = _ps_escape(text, i)
    acc.add(ch)
    return i


def _split_ps(text: str) -> tuple[tuple[str, ...], ...]:
    acc = _Commands()
    i, n = 0, len(text)
    at_statement_start = True
    while i < n:
        c = text[i]
        if c == "`":
            i = _ps_backtick(text, i, acc)
            continue
        if c in _PS_SINGLE_QUOTES:
            i = _ps_quoted(text, i, acc, _PS_SINGLE_QUOTES, "single")
            at_statement_start = False
            continue
        if c in _PS_DOUBLE_QUOTES:
            i = _ps_quoted(text, i, acc, _PS_DOUBLE_QUOTES, "double")
            at_statement_start = False
            continue
        if c == "\n" or c in ";|" or (c == "&" and text.startswith("&&", i)):
            acc.end_command()
            i += 2 if text.startswith(("&&", "||"), i) else 1
            at_statement_start = True
            continue
        if c == "&" and not acc.in_word and at_statement_start:
            i += 1  # the call operator
            at_statement_start = False
            continue
        if c.isspace():
            acc.end_word()
            i += 1
            continue
        if c == "<" and text.startswith("<#", i):
            end = text.find("#>", i + 2)
            i = n if end < 0 else end + 2
            continue
        skipped = _skip_redirect_or_comment(text, i, acc)
        if skipped is not None:
            i = skipped
            continue
        acc.add(c)
        at_statement_start = False
        i += 1
    acc.end_command()
    return tuple(acc.commands)


def _cmd_caret(text: str, i: int, out: list[str]) -> int:
    """A caret at `i` outside quotes: the next character literally, or a continuation (the line break removed and
    the first character of the next line literal). Returns the index after it."""
    n = len(text)
    j = i + 1
    while j < n and text[j] == "\r":
        j += 1
    if j >= n:
        return j
    if text[j] != "\n":
        out.append(text[j])
        return j + 1
    j += 1
    while j < n and text[j] == "\r":
        j += 1
    if j < n:
        out.append(text[j])
        j += 1
    return j


def _cmd_redirect(text: str, i: int, out: list[str]) -> int:
    """A redirection at `i` (`>`, `>>`, `2>&1`, `<`): drop an fd number written right before it, and its target."""
    n = len(text)
    while out and is_digits(out[-1]) and (len(out) == 1 or out[-2] in " \t"):
        out.pop()
    i += 1
    while i < n and text[i] in ">&":
        i += 1
    while i < n and text[i] in " \t":
        i += 1
    while i < n and text[i] not in " \t\n&|":
        if text[i] == '"':
            end = text.find('"', i + 1)
            i = n if end < 0 else end + 1
        else:
            i += 1
    return i


class _CmdLines:
    """The commands of cmd.exe's own pass, one string each."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.out: list[str] = []

    def finish(self) -> None:
        line = "".join(self.out).strip(" \t")
        if line.startswith("@"):
            line = line[1:].lstrip(" \t")
        if line:
            self.commands.append(line)
        self.out = []


def _cmd_lines(text: str) -> list[str]:
    """cmd.exe's own pass: carets and continuations removed, split at unquoted `&`, `|`, `&&`, `||` and line ends,
    redirections dropped. Quotes are kept for the program's own splitting."""
    acc = _CmdLines()
    quoted = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        i += 1
        if c == "\r":
            continue  # cmd.exe strips every carriage return
        if quoted:
            quoted = c not in '"\n'
            if c == "\n":
                acc.finish()
            else:
                acc.out.append(c)
        elif c == "^":
            i = _cmd_caret(text, i - 1, acc.out)
        elif c == "\n" or c in "&|":
            acc.finish()
            i += 1 if text.startswith(("&&", "||"), i - 1) else 0
        elif c in "<>":
            i = _cmd_redirect(text, i - 1, acc.out)
        else:
            quoted = c == '"'
            acc.out.append(c)
    acc.finish()
    return acc.commands


def _argv0(line: str, i: int) -> tuple[str, int]:
    """CommandLineToArgvW's program name at `i`: a quoted run, or up to the first blank (backslashes literal)."""
    n = len(line)
    if line[i] == '"':
        end = line.find('"', i + 1)
        end = n if end < 0 else end
        return line[i + 1 : end], end + 1
    j = i
    while j < n and line[j] not in " \t":
        j += 1
    return line[i:j], j


def _argv_word(line: str, i: int) -> tuple[str, int]:
    """One argument from `i` by CommandLineToArgvW's rules (backslashes before quotes, doubled quotes)."""
    n = len(line)
    buf: list[str] = []
    qcount = 0
    backslashes = 0
    while i < n:
        c = line[i]
        if c in " \t" and qcount == 0:
            break
        i += 1
        if c == "\\":
            backslashes += 1
            buf.append(c)
            continue
        if c != '"':
            backslashes = 0
            buf.append(c)
            continue
        if backslashes % 2 == 0:
            del buf[len(buf) - backslashes // 2 :]
            qcount += 1
        else:
            del buf[len(buf) - backslashes // 2 - 1 :]
            buf.append('"')
        backslashes = 0
        while i < n and line[i] == '"':
            qcount += 1
            if qcount == 3:
                buf.append('"')
                qcount = 0
            i += 1
        if qcount == 2:
            qcount = 0
    return "".join(buf), i


def split_windows_command_line(line: str) -> tuple[str, ...]:
    """Split a Windows command line as CommandLineToArgvW does (the program name has its own simpler rule)."""
    n = len(line)
    i = 0
    while i < n and line[i] in " \t":
        i += 1
    if i >= n:
        return ()
    first, i = _argv0(line, i)
    args = [first]
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            break
        word, i = _argv_word(line, i)
        args.append(word)
    return tuple(args)


def _split_cmd(text: str) -> tuple[tuple[str, ...], ...]:
    out = []
    for line in _cmd_lines(text):
        argv = split_windows_command_line(line)
        if argv:
            out.append(argv)
    return tuple(out)


def split_commands(text: str, shell: Shell | str) -> tuple[tuple[str, ...], ...]:
    """Every simple command in `text` (separated by line ends, `;`, `&&`, `|` ...), each as its argv."""
    sh = Shell(shell)
    if sh is Shell.SH:
        return _split_sh(text)
    if sh is Shell.POWERSHELL:
        return _split_ps(text)
    return _split_cmd(text)


def split(text: str, shell: Shell | str) -> tuple[str, ...]:
    """The argv of a command line holding one command; raises if it holds several."""
    commands = split_commands(text, shell)
    if not commands:
        return ()
    if len(commands) > 1:
        raise ShellSyntaxError(f"expected one command, found {len(commands)}")
    return commands[0]


def _written_by_fitplan(text: str) -> tuple[Shell, ...]:
    """The shells in which `text` is exactly what `join` writes for the argv that shell reads from it: fitplan's
    own exports are recognised by writing them again, not guessed (a Windows path reads differently in sh)."""
    want = text.strip().replace("\r\n", "\n")
    if len(want) > MAX_RECOGNISED_CHARS:
        return ()
    found = []
    for sh in (Shell.SH, Shell.POWERSHELL, Shell.CMD):
        try:
            commands = split_commands(want, sh)
            if len(commands) != 1:
                continue
            argv = commands[0]
            if want in (join(argv, sh, exact_text=False), join(argv, sh, multiline=True, exact_text=False)):
                found.append(sh)
        except FitplanError:
            continue
    return tuple(found)


#: A paste longer than this is not written again to recognise it (the guess decides alone).
MAX_RECOGNISED_CHARS = 1 << 16
#: A line-end character of a continued line, and the shell it belongs to.
_CONTINUATIONS = {"\\": Shell.SH, "`": Shell.POWERSHELL, "^": Shell.CMD}


def detect_shell(text: str) -> Shell:
    """Which shell a pasted command was written for: the one whose fitplan export it is exactly, else a guess from
    its continuations, quotes and call syntax."""
    exact = _written_by_fitplan(text)
    guess = _guess_shell(text)
    if not exact or guess in exact:
        return guess
    # the guess reads it differently from how fitplan wrote it: the shell that wrote it decides
    try:
        same = split_commands(text, guess) == split_commands(text, exact[0])
    except FitplanError:
        same = False
    return guess if same else exact[0]


def _guess_shell(text: str) -> Shell:
    stripped = [line.rstrip() for line in text.splitlines() if line.strip()]
    votes = {Shell.SH: 0, Shell.POWERSHELL: 0, Shell.CMD: 0}
    for line in stripped[:-1]:
        sh = _CONTINUATIONS.get(line[-1])
        if sh is not None:
            votes[sh] += 3
    first = stripped[0].lstrip() if stripped else ""
    for sh, points in _syntax_votes(text, first):
        votes[sh] += points
    best = max(votes.values())
    return next(sh for sh in (Shell.SH, Shell.POWERSHELL, Shell.CMD) if votes[sh] == best)


def _syntax_votes(text: str, first: str) -> list[tuple[Shell, int]]:
    """Points for each shell whose call syntax, variables or paths the text uses."""
    out: list[tuple[Shell, int]] = []
    if first.startswith("& ") or "$env:" in text or re.search(r"(?i)\bSet-Location\b|\.ps1\b", text):
        out.append((Shell.POWERSHELL, 2))
    if re.search(r"(?i)^\s*(set|cd /d|rem)\s", text, re.M) or re.search(r"%[A-Za-z_][A-Za-z0-9_]*%", text):
        out.append((Shell.CMD, 2))
    if re.search(r"(?m)^\s*(export\s|[A-Za-z_][A-Za-z0-9_]*=\S+\s)", text) or "$HOME" in text or "~/" in text:
        out.append((Shell.SH, 2))
    if re.search(r'\.exe"?\s', text) or re.search(r'"[A-Za-z]:\\', text):
        out += [(Shell.CMD, 1), (Shell.POWERSHELL, 1)]
    if "'" in text and re.search(r"[A-Za-z]:\\", text):
        out.append((Shell.POWERSHELL, 1))
    if re.search("[\u2018\u2019\u201a\u201b]{2}", text):  # PowerShell doubles typographic quotes in '...'
        out.append((Shell.POWERSHELL, 2))
    return out


def join_many(commands: Iterable[Sequence[str]], shell: Shell | str) -> str:
    """Several commands, one per line."""
    return "\n".join(join(c, shell) for c in commands)
