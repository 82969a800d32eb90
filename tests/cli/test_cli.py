"""The command line's conventions: version, help, exit codes, errors on stderr, NO_COLOR, --json everywhere."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import pytest

import fitplan
from fitplan import cli
from fitplan.commands import _output as out
from fitplan.core.base.errors import GGUFError
from support.models import REPO

ROOT = REPO


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def color_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment where colour would be allowed on a terminal."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    return monkeypatch


def fake_command(monkeypatch: pytest.MonkeyPatch, handler: object, accepts_extra: bool = False) -> None:
    """Register a subcommand `fake` (module `fitplan.commands.fake`) in place of the real ones."""

    def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        p = sub.add_parser(
            "fake", help="a test command", epilog="examples:\n  fitplan fake x\n  fitplan fake y"
        )
        p.add_argument("path", nargs="?")
        p.add_argument("--json", action="store_true")
        p.set_defaults(handler=handler, accepts_extra=accepts_extra)

    module = types.ModuleType("fitplan.commands.fake")
    module.register = register  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fitplan.commands.fake", module)
    monkeypatch.setattr(cli, "COMMANDS", ("fake",))


# --- version and help ---------------------------------------------------------------------------------------


def test_version_names_the_llama_cpp_build(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == (
        f"fitplan {fitplan.__version__} (estimates llama.cpp commit {fitplan.LLAMA_CPP_COMMIT}, "
        f"build {fitplan.LLAMA_CPP_BUILD})"
    )


def test_version_through_python_dash_m() -> None:
    env = dict(os.environ, NO_COLOR="1")
    proc = subprocess.run(
        [sys.executable, "-m", "fitplan", "--version"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert fitplan.LLAMA_CPP_COMMIT in proc.stdout
    assert proc.stderr == ""


def test_help_has_examples_exit_codes_and_every_registered_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "examples:" in text
    assert "exit status:" in text and "NO_COLOR" in text
    registered = cli.build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in registered:
        assert name in text


def test_subcommand_examples_keep_their_line_breaks(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_command(monkeypatch, lambda args, extra: 0)
    assert cli.main(["fake", "--help"]) == 0
    assert "examples:\n  fitplan fake x\n  fitplan fake y" in capsys.readouterr().out


def registered_subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("name", cli.COMMANDS)
def test_every_subcommand_takes_json_and_shows_examples(name: str) -> None:
    parser = registered_subparsers()[name]
    options = {s for a in parser._actions for s in a.option_strings}
    assert "--json" in options, f"`fitplan {name}` has no --json"
    assert parser.epilog and "example" in parser.epilog, f"`fitplan {name} --help` shows no examples"


# --- exit codes and errors ------------------------------------------------------------------------------------


def test_unknown_command_is_bad_input_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["no-such-command"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "invalid choice: 'no-such-command'" in captured.err


def test_unknown_option_is_bad_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_command(monkeypatch, lambda args, extra: 0)
    assert cli.main(["fake", "--no-such-flag"]) == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_extra_flags_reach_commands_that_accept_them(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def handler(args: argparse.Namespace, extra: list[str]) -> int:
        seen.append(extra)
        return 1

    fake_command(monkeypatch, handler, accepts_extra=True)
    assert cli.main(["fake", "m.gguf", "-c", "8192", "--flash-attn", "on"]) == 1
    assert seen == [["-c", "8192", "--flash-attn", "on"]]


def test_handler_exit_code_is_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_command(monkeypatch, lambda args, extra: out.EXIT_DOES_NOT_FIT)
    assert cli.main(["fake"]) == 1


def test_fitplan_errors_go_to_stderr_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def handler(args: argparse.Namespace, extra: list[str]) -> int:
        raise GGUFError("bad magic b'GGUX'", offset=0, source="m.gguf")

    fake_command(monkeypatch, handler)
    assert cli.main(["fake"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "fitplan: error: m.gguf: bad magic b'GGUX' at offset 0\n"


def test_missing_file_is_bad_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def handler(args: argparse.Namespace, extra: list[str]) -> int:
        Path(args.path).read_bytes()
        return 0

    fake_command(monkeypatch, handler)
    missing = tmp_path / "absent.gguf"
    assert cli.main(["fake", str(missing)]) == 2
    assert capsys.readouterr().err == f"fitplan: error: {missing}: No such file or directory\n"


# --- colour ---------------------------------------------------------------------------------------------------


def test_colour_on_a_terminal(color_env: pytest.MonkeyPatch) -> None:
    assert out.style("fits", out.GREEN, stream=FakeTTY()) == "\x1b[32mfits\x1b[0m"


def test_no_color_disables_colour(color_env: pytest.MonkeyPatch) -> None:
    color_env.setenv("NO_COLOR", "1")
    assert out.style("fits", out.GREEN, stream=FakeTTY()) == "fits"
    assert "\x1b" not in out.table(["a", "b"], [[1, 2]], stream=FakeTTY())


def test_empty_no_color_does_not_disable_colour(color_env: pytest.MonkeyPatch) -> None:
    color_env.setenv("NO_COLOR", "")  # https://no-color.org: only a non-empty value counts
    assert out.use_color(FakeTTY())


def test_no_colour_when_not_a_terminal_or_dumb(color_env: pytest.MonkeyPatch) -> None:
    assert out.style("fits", out.GREEN, stream=io.StringIO()) == "fits"
    color_env.setenv("TERM", "dumb")
    assert out.style("fits", out.GREEN, stream=FakeTTY()) == "fits"


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
@pytest.mark.parametrize(("no_color", "expected"), [("", "\x1b[31mx\x1b[0m"), ("1", "x")])
def test_no_color_in_a_real_process_on_a_terminal(no_color: str, expected: str) -> None:
    import pty

    master, slave = pty.openpty()
    env = dict(os.environ, NO_COLOR=no_color, TERM="xterm")
    script = "from fitplan.commands import _output as o; print(repr(o.style('x', o.RED)), flush=True)"
    try:
        subprocess.run(
            [sys.executable, "-c", script], stdout=slave, env=env, cwd=ROOT, check=True, timeout=60
        )
        printed = os.read(master, 4096).decode().strip()
    finally:
        os.close(slave)
        os.close(master)
    assert printed == repr(expected)


# --- tables, sizes, JSON ----------------------------------------------------------------------------------------


def test_table_pads_and_aligns_ignoring_colour(color_env: pytest.MonkeyPatch) -> None:
    tty = FakeTTY()
    text = out.table(
        ["device", "used"],
        [["CUDA0", out.style("21.5 GiB", out.RED, stream=tty)], ["Host", "900 MiB"]],
        align="lr",
        stream=tty,
    )
    lines = text.split("\n")
    assert lines[0] == "\x1b[1mdevice      used\x1b[0m"
    assert lines[1] == "CUDA0   \x1b[31m21.5 GiB\x1b[0m"
    assert lines[2] == "Host     900 MiB"


def test_table_without_header_and_ragged_rows() -> None:
    assert out.table([], [["a", "bb", "c"], ["dd"]]) == "a   bb  c\ndd"


def test_sizes() -> None:
    assert out.size(100) == "100 B"
    assert out.size(1536) == "1.50 KiB"  # 1536 / 1024
    assert out.size(3 << 30) == "3.00 GiB"
    assert out.size(-(5 << 20)) == "-5.00 MiB"
    assert out.size(2 << 40) == "2.00 TiB"
    assert out.size(5000 << 40) == "5000.00 TiB"
    assert out.mib(1_294_467_072) == "1234.50 MiB"  # 1234.5 * 1048576


class Kind(StrEnum):
    GPU = "gpu"


@dataclass(frozen=True)
class Row:
    name: str
    kind: Kind
    path: Path
    sizes: tuple[int, ...]
    tags: frozenset[str]
    extra: dict[str, float] | None = None


def test_json_of_dataclasses_enums_and_paths() -> None:
    row = Row("CUDA0", Kind.GPU, Path("/models/a.gguf"), (1, 2), frozenset({"b", "a"}), {"x": 0.5})
    buf = io.StringIO()
    out.print_json({"rows": [row], "n": 1}, stream=buf)
    assert json.loads(buf.getvalue()) == {
        "rows": [
            {
                "name": "CUDA0",
                "kind": "gpu",
                "path": "/models/a.gguf",
                "sizes": [1, 2],
                "tags": ["a", "b"],
                "extra": {"x": 0.5},
            }
        ],
        "n": 1,
    }
    assert buf.getvalue().endswith("}\n")


def test_json_refuses_what_it_cannot_represent() -> None:
    with pytest.raises(TypeError, match="bytes"):
        out.dumps_json({"raw": b"\x00"})
    with pytest.raises(ValueError):
        out.dumps_json({"x": float("nan")})


def test_error_and_warn_write_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert out.error("no such model") == out.EXIT_BAD_INPUT
    out.warn("flash attention resolved to off")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err == "fitplan: error: no such model\nfitplan: warning: flash attention resolved to off\n"
    )
