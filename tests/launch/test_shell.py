"""Quoting argv for sh, PowerShell and cmd.exe, and splitting pasted command lines back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitplan.core.launch.shell import (
    Shell,
    ShellSyntaxError,
    default_shell,
    detect_shell,
    file_writing_lines,
    join,
    quote,
    split,
    split_commands,
    split_windows_command_line,
)

NASTY = (
    "",
    " ",
    '"',
    "'",
    "\\",
    '\\"',
    "\\\\",
    "$HOME",
    "`",
    "%PATH%",
    "!x!",
    "^",
    "&",
    "|",
    ";",
    "<",
    ">",
    "(",
    ")",
    "#",
    "~",
    "*",
    "?",
    "{a,b}",
    "\t",
    "\u2019",  # PowerShell single quote
    "\u201c",  # PowerShell double quote
    "\u00a0",  # no-break space
    "\u2013",  # en dash (PowerShell reads it as '-')
    "é",
    "日本語",
    "C:\\Program Files\\llama\\",
    "-ts",
    "3,1",
    "1e3",
    "0x10",
    "007",
    "1kb",
    "--%",
    "@args",
    "a=b",
)

#: What fitplan refuses to write into a command (tests of the refusal are below): control characters (tab aside),
#: line and paragraph separators, bidirectional-text controls.
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_PRINTABLE = st.characters(blacklist_characters=BIDI, blacklist_categories=("Cs", "Cc", "Zl", "Zp"))
_text = st.text(st.one_of(_PRINTABLE, st.just("\t")), max_size=16)
_nasty = st.sampled_from(NASTY)
ARG = st.one_of(_text, _nasty, st.lists(_nasty, min_size=2, max_size=4).map("".join))


def _for_cmd(s: str) -> str:
    """cmd.exe refuses '!' (delayed expansion) and line breaks."""
    return s.replace("!", "")


# ---------------------------------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(ARG, max_size=6), st.booleans())
def test_sh_round_trip(args: list[str], multiline: bool) -> None:
    argv = ("llama-server", *args)
    assert split(join(argv, Shell.SH, multiline=multiline), Shell.SH) == argv


@settings(max_examples=300, deadline=None)
@given(st.lists(ARG, max_size=6), st.booleans())
def test_powershell_round_trip(args: list[str], multiline: bool) -> None:
    argv = ("llama-server", *args)
    assert split(join(argv, Shell.POWERSHELL, multiline=multiline), Shell.POWERSHELL) == argv


@settings(max_examples=300, deadline=None)
@given(st.lists(ARG.map(_for_cmd), max_size=6), st.booleans())
def test_cmd_round_trip(args: list[str], multiline: bool) -> None:
    argv = ("llama-server.exe", *args)
    assert split(join(argv, Shell.CMD, multiline=multiline), Shell.CMD) == argv


_program = st.text(
    st.characters(blacklist_characters='"!' + BIDI, blacklist_categories=("Cs", "Cc", "Zl", "Zp")),
    min_size=1,
    max_size=24,
)


@settings(max_examples=200, deadline=None)
@given(_program)
def test_program_paths_round_trip_in_every_shell(program: str) -> None:
    argv = (program, "-m", "model.gguf")
    for sh in Shell:
        if sh is Shell.CMD and program.strip(" \t") != program:
            continue  # cmd.exe strips blanks around the whole line; a path cannot start or end with one there
        assert split(join(argv, sh), sh) == argv, sh


@pytest.mark.parametrize("shell", list(Shell))
@pytest.mark.parametrize("arg", NASTY)
def test_every_nasty_string_survives_alone(shell: Shell, arg: str) -> None:
    argv = ("llama-server", "--alias", arg, "-c", "4096")
    if shell is Shell.CMD and "!" in arg:
        with pytest.raises(ShellSyntaxError, match="delayed expansion"):
            join(argv, shell)
        return
    assert split(join(argv, shell), shell) == argv


# ---------------------------------------------------------------------------------------------------------------------
# Golden renderings
# ---------------------------------------------------------------------------------------------------------------------

TYPICAL = (
    "llama-server",
    "-m",
    "/models/Qwen3-30B-A3B-Q4_K_M.gguf",
    "-c",
    "32768",
    "-np",
    "1",
    "-ctk",
    "q8_0",
    "-ctv",
    "q8_0",
    "--n-cpu-moe",
    "12",
    "-ts",
    "3,1",
)

WINDOWS = (
    "C:\\Program Files\\llama.cpp\\llama-server.exe",
    "-m",
    "D:\\My Models\\gemma-3-27b-it-Q4_K_M.gguf",
    "-ot",
    "blk\\.(1|2)\\.ffn_.*_exps=CPU",
    "--alias",
    '100% it\'s "fast"!',
)


def test_golden_sh() -> None:
    assert join(TYPICAL, Shell.SH) == (
        "llama-server -m /models/Qwen3-30B-A3B-Q4_K_M.gguf -c 32768 -np 1 -ctk q8_0 -ctv q8_0 --n-cpu-moe 12 -ts 3,1"
    )
    assert join(TYPICAL[:5], Shell.SH, multiline=True) == (
        "llama-server \\\n  -m /models/Qwen3-30B-A3B-Q4_K_M.gguf \\\n  -c 32768"
    )
    assert join(WINDOWS, Shell.SH) == (
        "'C:\\Program Files\\llama.cpp\\llama-server.exe' -m 'D:\\My Models\\gemma-3-27b-it-Q4_K_M.gguf' "
        "-ot 'blk\\.(1|2)\\.ffn_.*_exps=CPU' --alias '100% it'\"'\"'s \"fast\"!'"
    )


def test_golden_powershell() -> None:
    assert join(TYPICAL, Shell.POWERSHELL) == (
        "llama-server -m /models/Qwen3-30B-A3B-Q4_K_M.gguf -c 32768 -np 1 -ctk q8_0 -ctv q8_0 --n-cpu-moe 12 "
        "-ts '3,1'"  # a bare 3,1 would be an array literal
    )
    assert join(WINDOWS, Shell.POWERSHELL) == (
        "& 'C:\\Program Files\\llama.cpp\\llama-server.exe' -m 'D:\\My Models\\gemma-3-27b-it-Q4_K_M.gguf' "
        "-ot 'blk\\.(1|2)\\.ffn_.*_exps=CPU' --alias '100% it''s \"fast\"!'"
    )
    assert join(TYPICAL[:3], Shell.POWERSHELL, multiline=True) == (
        "llama-server `\n  -m /models/Qwen3-30B-A3B-Q4_K_M.gguf"
    )


def test_golden_cmd() -> None:
    assert join(TYPICAL, Shell.CMD) == join(TYPICAL, Shell.SH)
    with pytest.raises(ShellSyntaxError, match="delayed expansion"):
        join(WINDOWS, Shell.CMD)  # the '!': cmd.exe reads it differently with delayed expansion on and off
    # '%' keeps a caret right after it where a variable name could start: '%PATH%' would be expanded before
    # cmd.exe removes carets, and so could '% it' (a variable name may start with a blank: set " it=x")
    assert join((*WINDOWS[:-1], '100% it\'s "fast" %PATH%'), Shell.CMD) == (
        '"C:\\Program Files\\llama.cpp\\llama-server.exe" -m "D:\\My Models\\gemma-3-27b-it-Q4_K_M.gguf" '
        '-ot blk\\.^(1^|2^)\\.ffn_.*_exps=CPU --alias ^"100%^ it\'s \\^"fast\\^" %^PATH%^"'
    )
    assert (
        join(TYPICAL[:3], Shell.CMD, multiline=True)
        == "llama-server ^\n  -m /models/Qwen3-30B-A3B-Q4_K_M.gguf"
    )


def test_quote_single_words() -> None:
    assert quote("a b", Shell.SH) == "'a b'"
    assert quote("it's", Shell.SH) == "'it'\"'\"'s'"
    assert quote("", Shell.SH) == "''"
    assert quote("a=b", Shell.SH) == "a=b"
    assert quote("a=b", Shell.SH, program=True) == "'a=b'"  # else sh reads an assignment
    assert quote("\u2019", Shell.POWERSHELL) == "'\u2019\u2019'"
    assert quote("1e3", Shell.POWERSHELL) == "'1e3'"
    assert quote("4096", Shell.POWERSHELL) == "4096"
    assert quote("-1", Shell.POWERSHELL) == "-1"
    assert quote("", Shell.CMD) == '""'
    assert quote("a\\b c\\", Shell.CMD) == '"a\\b c\\\\"'  # a trailing backslash is doubled before the quote


def test_cmd_cannot_carry_line_breaks() -> None:
    with pytest.raises(ShellSyntaxError):
        join(("llama-server", "a\nb"), Shell.CMD)
    with pytest.raises(ShellSyntaxError):
        quote("a\x00", Shell.SH)


# ---------------------------------------------------------------------------------------------------------------------
# Parsing what people paste
# ---------------------------------------------------------------------------------------------------------------------


def test_sh_paste_with_env_continuations_comments_and_pipes() -> None:
    text = (
        "# start the server\n"
        "CUDA_VISIBLE_DEVICES=0,1 ./build/bin/llama-server \\\n"
        '  -m "$HOME/models/My Model.gguf" \\\n'
        "  -c 16384 --alias it\\'s  2>&1 | tee server.log\n"
    )
    assert split_commands(text, Shell.SH) == (
        (
            "CUDA_VISIBLE_DEVICES=0,1",
            "./build/bin/llama-server",
            "-m",
            "$HOME/models/My Model.gguf",
            "-c",
            "16384",
            "--alias",
            "it's",
        ),
        ("tee", "server.log"),
    )
    assert split("a 'b''c' \"d\\\"e\" f\\ g $'h\\ti'", Shell.SH) == ("a", "bc", 'd"e', "f g", "h\ti")
    assert split("llama-server -m x.gguf > log.txt", Shell.SH) == ("llama-server", "-m", "x.gguf")


def test_powershell_paste() -> None:
    text = (
        "$env:CUDA_VISIBLE_DEVICES = '0'\r\n"
        '& "C:\\llama\\llama-server.exe" `\r\n'
        "  -m 'D:\\models\\it''s.gguf' `\r\n"
        '  -c 8192 --alias "a`"b" # trailing comment\r\n'
    )
    assert split_commands(text, Shell.POWERSHELL) == (
        ("$env:CUDA_VISIBLE_DEVICES", "=", "0"),
        ("C:\\llama\\llama-server.exe", "-m", "D:\\models\\it's.gguf", "-c", "8192", "--alias", 'a"b'),
    )
    assert split('x "a""b" \u201cc\u201d `$y', Shell.POWERSHELL) == ("x", 'a"b', "c", "$y")


def test_cmd_paste() -> None:
    text = (
        "@echo off\r\n"
        "set CUDA_VISIBLE_DEVICES=0\r\n"
        'C:\\llama\\llama-server.exe -m "D:\\My Models\\m.gguf" ^\r\n'
        '  -c 8192 -ot "blk\\.(0|1)\\.ffn=CPU" > log.txt & echo done\r\n'
    )
    assert split_commands(text, Shell.CMD) == (
        ("echo", "off"),
        ("set", "CUDA_VISIBLE_DEVICES=0"),
        (
            "C:\\llama\\llama-server.exe",
            "-m",
            "D:\\My Models\\m.gguf",
            "-c",
            "8192",
            "-ot",
            "blk\\.(0|1)\\.ffn=CPU",
        ),
        ("echo", "done"),
    )


def test_commandlinetoargvw_examples() -> None:
    # The examples of Microsoft's "Parsing C++ command-line arguments" table.
    assert split_windows_command_line('p "abc" d e') == ("p", "abc", "d", "e")
    assert split_windows_command_line('p a\\\\\\b d"e f"g h') == ("p", "a\\\\\\b", "de fg", "h")
    assert split_windows_command_line('p a\\\\\\"b c d') == ("p", 'a\\"b', "c", "d")
    assert split_windows_command_line('p a\\\\\\\\"b c" d e') == ("p", "a\\\\b c", "d", "e")
    # argv[0] keeps its backslashes; a doubled quote inside quotes is one literal quote
    assert split_windows_command_line('"C:\\a b\\x.exe" "a""b"') == ("C:\\a b\\x.exe", 'a"b')


def test_unterminated_quotes_are_errors() -> None:
    with pytest.raises(ShellSyntaxError):
        split("llama-server -m 'x", Shell.SH)
    with pytest.raises(ShellSyntaxError):
        split('llama-server -m "x', Shell.POWERSHELL)
    with pytest.raises(ShellSyntaxError):
        split("a\nb", Shell.SH)


@pytest.mark.parametrize(
    ("text", "shell"),
    [
        ("llama-server \\\n  -m x.gguf", Shell.SH),
        ("llama-server -m ~/x.gguf", Shell.SH),
        ("llama-server -m x.gguf", Shell.SH),
        ("& 'C:\\x\\llama-server.exe' -m 'D:\\m.gguf'", Shell.POWERSHELL),
        ("llama-server.exe `\n  -m x.gguf", Shell.POWERSHELL),
        ("llama-server.exe ^\n  -m x.gguf", Shell.CMD),
        ("llama-server.exe -m %USERPROFILE%\\m.gguf", Shell.CMD),
    ],
)
def test_detect_shell(text: str, shell: Shell) -> None:
    assert detect_shell(text) is shell


def test_default_shell() -> None:
    assert default_shell("win32") is Shell.POWERSHELL
    assert default_shell("linux") is Shell.SH
    assert default_shell("darwin") is Shell.SH


MODELFILE_LINES = [
    "FROM /models/100% & <more>.gguf",
    "PARAMETER num_ctx 8192",
    "",
    "SYSTEM (say) ^hi^ %PATH%",
]


def test_a_file_written_by_sh_holds_the_lines_exactly(tmp_path: Path) -> None:
    script = "\n".join(file_writing_lines("Modelfile", MODELFILE_LINES, Shell.SH))
    subprocess.run(["sh", "-c", script], cwd=tmp_path, check=True, timeout=30)
    assert (tmp_path / "Modelfile").read_text().splitlines() == MODELFILE_LINES


def test_cmd_echo_lines_escape_every_metacharacter() -> None:
    lines = file_writing_lines("Modelfile", MODELFILE_LINES, Shell.CMD)
    assert lines[0] == "> Modelfile echo(FROM /models/100%^ ^& ^<more^>.gguf"
    assert lines[2] == ">> Modelfile echo("  # an empty line, not "ECHO is on."
    # %^PATH% names no variable: cmd's %-expansion finds none, then the caret goes
    assert lines[3] == ">> Modelfile echo(SYSTEM ^(say^) ^^hi^^ %^PATH%"


@pytest.mark.parametrize("shell", list(Shell))
def test_file_lines_refuse_what_would_break_out(shell: Shell) -> None:
    with pytest.raises(ShellSyntaxError):
        file_writing_lines("Modelfile", ["FROM x\x1b[2J"], shell)
    with pytest.raises(ShellSyntaxError):
        file_writing_lines(
            "Modelfile", [{"sh": "EOF", "powershell": "'@ oops", "cmd": "FROM !x!"}[shell.value]], shell
        )
