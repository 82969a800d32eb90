"""Hostile text in exported commands (issue 13, class 6): every shell's own rules, on hostile paths.

The rule is "quote or refuse": a rendered command either gives the program exactly the argv fitplan meant, or
rendering raises `ShellSyntaxError` (one line). Where a real shell is installed here (bash, dash, zsh), the rendered
command is run through it with `printf '%s\\0'` as the program, and the words it receives are compared with the argv.
PowerShell and cmd.exe are not available here: their rules are checked on the rendered text (PowerShell's dash
words, cmd.exe's `%` expansion, with a model of that expansion written for this test) and through the splitters.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitplan.core.base.errors import FlagError
from fitplan.core.base.launch_settings import Engine, LaunchSettings
from fitplan.core.launch.command_line import env_lines, ollama_export, to_preset_ini
from fitplan.core.launch.shell import Shell, ShellSyntaxError, join, quote, split

#: Hostile paths and values, one per rule they attack.
HOSTILE = (
    "-m.gguf",  # PowerShell splits a bare dash word at its first "."
    "--alias.x",
    "-a:b",  # PowerShell: a parameter with an argument
    "-",
    "--",
    "--%",  # PowerShell's stop-parsing token
    "=ls",  # zsh: =cmd expands to the command's path
    "=",
    "==x",
    "%PATH%",
    "%PATH:~0,1%",  # cmd.exe substring: ^% did not stop it
    "%PATH:a=b%",  # cmd.exe substitution
    "%CD%x%OS%",
    "%%",
    "50%",
    "a % b",
    "$(id)",
    "`id`",
    "${HOME}",
    "$HOME",
    "~root",
    "*",
    "[a-z]",
    "{a,b}",
    "a;b",
    "a&&b",
    "a|b",
    "a>b",
    "a<b",
    "'",
    '"',
    "\\",
    "\\\\server\\share\\m.gguf",
    "C:\\Program Files\\m.gguf",
    "it's",
    "\u2018x\u2019",  # PowerShell reads typographic quotes as quotes
    "\u201cx\u201d",
    "\u2013m",  # en dash: PowerShell reads it as a dash
    "#x",
    "x #y",
    "^",
    "a^b",
    "(x)",
    "@x",
    "日本語.gguf",
    " lead",
    "trail ",
    "\t",
)

#: Characters fitplan refuses in any argument (each reaches the terminal raw or changes how the command reads).
REFUSED = ("\n", "\r", "\x1b", "\x07", "\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\u202e", "\u2066", "\x00")

SHELLS = [s for s in ("bash", "dash", "zsh") if shutil.which(s)]


def _run_in(shell: str, lines: list[str]) -> list[list[str]]:
    """Run each line in `shell`; each line prints its words NUL-separated; lines are separated by a newline."""
    script = "".join(line + "\nprintf '\\n'\n" for line in lines)
    argv = [shell, "-f", "-c", script] if shell == "zsh" else [shell, "-c", script]
    done = subprocess.run(
        argv, capture_output=True, timeout=60, env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"}
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[:500]
    records = done.stdout.decode("utf-8").split("\n")[:-1]
    return [r.split("\0")[:-1] for r in records]


def _printf_line(args: tuple[str, ...], multiline: bool = False) -> str:
    # the first word after the format is a sentinel, so a command with no arguments still prints a record
    return join(("printf", "%s\\0", "S", *args), Shell.SH, multiline=multiline)


@pytest.mark.skipif(not SHELLS, reason="no POSIX shell installed")
@pytest.mark.parametrize("shell", SHELLS)
def test_hostile_paths_reach_the_program_unchanged_in_real_shells(shell: str) -> None:
    cases = [(h,) for h in HOSTILE] + [("-m", h, "-c", "4096") for h in HOSTILE] + [tuple(HOSTILE)]
    lines = [_printf_line(c, multiline=i % 2 == 1) for i, c in enumerate(cases)]
    got = _run_in(shell, lines)
    assert got == [["S", *c] for c in cases]


_PRINTABLE = st.characters(
    blacklist_characters="\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
    blacklist_categories=("Cs", "Cc", "Zl", "Zp"),
)
_WORD = st.one_of(st.text(_PRINTABLE, max_size=12), st.sampled_from(HOSTILE))


@pytest.mark.skipif(not SHELLS, reason="no POSIX shell installed")
@settings(max_examples=15, deadline=None)
@given(st.lists(st.lists(_WORD, max_size=5).map(tuple), min_size=20, max_size=20))
def test_generated_argv_round_trips_through_real_shells(batch: list[tuple[str, ...]]) -> None:
    lines = [_printf_line(c, multiline=len(c) % 2 == 0) for c in batch]
    for shell in SHELLS:
        assert _run_in(shell, lines) == [["S", *c] for c in batch], shell


@pytest.mark.skipif(not SHELLS, reason="no POSIX shell installed")
def test_hostile_program_paths_run_in_real_shells(tmp_path: object) -> None:
    import pathlib

    root = pathlib.Path(str(tmp_path))
    names = ["=prog", "if", "time", "a b", "it's", "$x", "-dash", "%x%", "日本"]
    lines, want = [], []
    for i, name in enumerate(names):
        d = root / f"d{i}"
        d.mkdir()
        prog = d / name
        prog.write_text("#!/bin/sh\nprintf '%s\\0' S \"$@\"\n")
        prog.chmod(0o755)
        # relative and absolute program words, as `--program` gives them
        lines.append(f"cd {quote(str(d), Shell.SH)} && " + join(("./" + name, "-m", "x.gguf"), Shell.SH))
        lines.append(join((str(prog), "-c", "1"), Shell.SH))
        want += [["S", "-m", "x.gguf"], ["S", "-c", "1"]]
    bare = join(("if", "x"), Shell.SH)
    assert bare.startswith("'if'")  # a reserved word in the program's place is quoted
    for shell in SHELLS:
        assert _run_in(shell, lines) == want, shell


@pytest.mark.parametrize("shell", list(Shell))
@pytest.mark.parametrize("ch", REFUSED)
def test_control_characters_are_refused_in_every_shell(shell: Shell, ch: str) -> None:
    with pytest.raises(ShellSyntaxError) as exc:
        join(("llama-server", "-m", f"/m/a{ch}b.gguf"), shell)
    assert "\n" not in str(exc.value) and "\x1b" not in str(exc.value)  # one line, no raw control character


@pytest.mark.parametrize("arg", HOSTILE)
def test_powershell_bare_dash_words_are_plain_flags(arg: str) -> None:
    word = quote(arg, Shell.POWERSHELL)
    if word == arg and arg.startswith("-"):
        assert re.fullmatch(r"--?[A-Za-z][A-Za-z0-9_-]*|-[0-9]+", arg), arg
    assert split(join(("llama-server", arg), Shell.POWERSHELL), Shell.POWERSHELL) == ("llama-server", arg)


def test_powershell_dash_words_with_a_dot_or_colon_are_quoted() -> None:
    assert join(("llama-server", "-m.gguf", "-a:b", "-ngl", "99"), Shell.POWERSHELL) == (
        "llama-server '-m.gguf' '-a:b' -ngl 99"
    )


def test_zsh_equals_word_is_quoted() -> None:
    assert quote("=ls", Shell.SH) == "'=ls'"
    assert quote("a=ls", Shell.SH) == "a=ls"  # "=" inside a word means nothing


# -- cmd.exe --------------------------------------------------------------------------------------------------------

#: A cmd.exe environment for the model below: names that hostile arguments try to expand.
_CMD_ENV = {"PATH": "C:\\Windows", "CD": "C:\\", "OS": "Windows_NT", "X": "1", "A": "2"}


def _cmd_percent_expansion(line: str) -> str:
    """cmd.exe's first phase at the interactive prompt, as documented for command lines: `%name%` (also with a
    `:~n,m` or `:a=b` modifier) is replaced when `name` is a defined variable; otherwise the text is left and the
    scan goes on at the second `%`. A replacement here is marked `<EXPANDED>` so that a test sees it."""
    out, i = [], 0
    while i < len(line):
        if line[i] != "%":
            out.append(line[i])
            i += 1
            continue
        end = line.find("%", i + 1)
        if end < 0:
            out.append(line[i:])
            break
        name = line[i + 1 : end].split(":", 1)[0]
        if name.upper() in _CMD_ENV:
            out.append("<EXPANDED>")
            i = end + 1
        else:
            out.append("%")
            i += 1
    return "".join(out)


@pytest.mark.parametrize("arg", [h for h in HOSTILE if "%" in h] + ["%X%%A%", "%^X%", "x%X:~0,1%y", '"%X%"'])
def test_cmd_percent_never_expands(arg: str) -> None:
    line = join(("llama-server.exe", "--alias", arg, "-c", "1"), Shell.CMD)
    assert "<EXPANDED>" not in _cmd_percent_expansion(line), line
    assert split(line, Shell.CMD) == ("llama-server.exe", "--alias", arg, "-c", "1")


def test_cmd_refuses_exclamation_marks() -> None:
    with pytest.raises(ShellSyntaxError, match="delayed expansion"):
        join(("llama-server.exe", "-m", "wow!.gguf"), Shell.CMD)


@settings(max_examples=300, deadline=None)
@given(st.lists(_WORD.map(lambda s: s.replace("!", "")), max_size=5))
def test_generated_cmd_lines_never_expand_a_variable(args: list[str]) -> None:
    argv = ("llama-server.exe", *args)
    line = join(argv, Shell.CMD)
    assert "<EXPANDED>" not in _cmd_percent_expansion(line)
    assert split(line, Shell.CMD) == argv


# -- ollama, environment lines, presets -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/m/a\nPARAMETER num_gpu 999.gguf", "/m/a\r.gguf", "/m/\x1b]0;x\x07.gguf", ' "/m/a']
)
def test_modelfile_from_path_cannot_inject_a_line(path: str) -> None:
    s = LaunchSettings(engine=Engine.OLLAMA, n_ctx=4096)
    with pytest.raises(FlagError) as exc:
        ollama_export(s, path)
    assert "\n" not in str(exc.value)


def test_modelfile_keeps_an_ordinary_path() -> None:
    exp = ollama_export(LaunchSettings(engine=Engine.OLLAMA, n_ctx=4096), "/m/My Model's (v2).gguf")
    assert exp.modelfile.splitlines()[0] == "FROM /m/My Model's (v2).gguf"


def test_powershell_environment_values_double_every_single_quote() -> None:
    # U+2019 closes a PowerShell string as "'" does: it must be doubled too
    text = env_lines([("OLLAMA_X", "a\u2019; Remove-Item x; \u2019")], Shell.POWERSHELL)
    assert text == "$env:OLLAMA_X = 'a\u2019\u2019; Remove-Item x; \u2019\u2019'"
    with pytest.raises(ShellSyntaxError):
        env_lines([("OLLAMA_X", "a\nb")], Shell.SH)


@pytest.mark.parametrize("ch", ["\x1b", "\x07", "\u202e"])
def test_preset_refuses_control_characters(ch: str) -> None:
    with pytest.raises(FlagError):
        to_preset_ini(LaunchSettings(), "x", f"/m/a{ch}.gguf")
