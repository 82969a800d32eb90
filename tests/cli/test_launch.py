"""`fitplan launch`: the whole path with a stand-in llama-server that replays real recorded logs
(tests/fixtures/launch, `tools/groundtruth/record_launch.py`), and with the real llama-server where a build is
present (FITPLAN_LLAMA_BUILD, like `verify`'s tests)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fitplan.cli import main
from fitplan.core.base.errors import FitplanError
from fitplan.core.gguf.reader import read_header
from fitplan.core.launch.launch_check import load_check
from fitplan.core.launch.server_process import ServerRun
from support.models import REPO, TESTS
from support.tools import load_tool

LAUNCH = TESTS / "fixtures" / "launch"
FAKE = TESTS / "support" / "fake_llama_server.py"
HEADER = TESTS / "fixtures" / "llamacpp" / "models" / "sparse" / "llama-3.1-8b.header.gguf"
REAL_BIN = Path(os.environ.get("FITPLAN_LLAMA_BUILD", "/work/llama/build")) / "bin"
REAL_SERVER = REAL_BIN / "llama-server"
needs_build = pytest.mark.skipif(not REAL_SERVER.exists(), reason="no llama.cpp build (FITPLAN_LLAMA_BUILD)")
#: the flags of the recorded launch (tools/groundtruth/record_launch.py): no repacking, no warm-up
FLAGS = ["-c", "4096", "-nr", "--no-warmup", "--host", "127.0.0.1", "-t", "2", "--host-ram", "64GiB"]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """The header of the recorded model, padded to its full size (a sparse file)."""
    dst = tmp_path / "llama-3.1-8b.gguf"
    shutil.copyfile(HEADER, dst)
    with dst.open("r+b") as f:
        f.truncate(read_header(HEADER, allow_incomplete=True).expected_file_size)
    return dst


def fake_server(tmp_path: Path, case: str | dict[str, object]) -> Path:
    """A folder with a `llama-server` that replays the recording `case` (a name in tests/fixtures/launch, or a
    recording given whole)."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    rec = LAUNCH / f"{case}.json" if isinstance(case, str) else d / "recording.json"
    if not isinstance(case, str):
        rec.write_text(json.dumps(case))
    exe = d / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "{rec}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return d


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_launch_compares_stops_and_saves_a_check(
    tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = fake_server(tmp_path, "loaded")
    monkeypatch.setenv("FAKE_LLAMA_ARGS", str(tmp_path / "args.json"))
    saved, log = tmp_path / "check.json", tmp_path / "server.log"
    rc = main(["launch", str(model), *FLAGS, "--llama-bin", str(d), "--check", "--quiet",
               "--save-check", str(saved), "--log-file", str(log)])  # fmt: skip
    text = capsys.readouterr().out
    assert rc == 0
    assert "every term within the estimate's band" in text
    for term in ("weights", "kv", "compute"):
        assert any(
            line.split()[:2] == ["Host", term] and line.endswith("within") for line in text.splitlines()
        )
    args = json.loads((tmp_path / "args.json").read_text())
    assert args[:2] == ["-m", str(model)] and args[-2:] == ["-lv", "4"]
    assert "--no-warmup" in args and args[args.index("-c") + 1] == "4096"
    back = load_check(saved)
    # the build as `llama-server --version` said it (this one was built from the source archive: no commit)
    assert json.loads((LAUNCH / "loaded.json").read_text())["version"].splitlines()[0] in back.build.text
    assert back.command[0] == "llama-server" and back.rows
    assert back.log.breakdown  # printed at exit, after the stop
    assert "model buffer size" in log.read_text()


def test_json(tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = fake_server(tmp_path, "loaded")
    assert main(["launch", str(model), *FLAGS, "--llama-bin", str(d), "--check", "--quiet", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["loaded"] and doc["failure"] is None and doc["check"]["all_within"]
    assert {r["term"] for r in doc["check"]["rows"]} == {"weights", "kv", "output", "compute"}


@pytest.mark.parametrize(
    ("case", "code", "words"),
    [
        ("oom", 1, "out of memory"),
        ("unknown-flag", 2, "does not accept -cnv"),
        ("port-in-use", 2, "is in use"),
    ],
)
def test_failures_are_one_line_with_the_log_kept(
    tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str], case: str, code: int, words: str
) -> None:
    d = fake_server(tmp_path, case)
    log = tmp_path / "server.log"
    cmd = json.loads((LAUNCH / f"{case}.json").read_text())["command"]
    flags = [*FLAGS, "-cnv"] if "-cnv" in cmd else FLAGS
    rc = main(
        ["launch", str(model), *flags, "--llama-bin", str(d), "--check", "--quiet", "--log-file", str(log)]
    )
    err = capsys.readouterr().err
    assert rc == code
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and words in errors[0] and str(log) in errors[0]
    recorded = json.loads((LAUNCH / f"{case}.json").read_text())["load"]
    assert log.read_text().splitlines() == recorded
    if case == "oom":  # 64 GiB of host RAM less the 16 GiB that could not be allocated: -c 4096 still fits
        assert "the plan for that much less free memory: llama-server -m" in err


def test_a_crash_is_one_line(tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = json.loads((LAUNCH / "loaded.json").read_text())
    # the recorded load cut before the model was loaded, then the process dies of SIGSEGV (the shell's 139)
    cut = next(i for i, line in enumerate(rec["load"]) if "compute buffer size" in line)
    d = fake_server(tmp_path, {**rec, "load": rec["load"][:cut], "returncode": 139})
    assert main(["launch", str(model), *FLAGS, "--llama-bin", str(d), "--check", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "stopped (exit code 139) before the model was loaded" in err


def test_a_missing_binary(tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", str(model), "--llama-bin", str(tmp_path / "nowhere")]) == 2
    assert "no llama-server at" in capsys.readouterr().err


def test_a_second_launch_is_refused_while_one_runs(
    tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = fake_server(tmp_path, "loaded")
    first = ServerRun([str(d / "llama-server")])
    first.start()
    try:
        assert first.wait(30).loaded
        assert main(["launch", str(model), *FLAGS, "--llama-bin", str(d), "--check", "--quiet"]) == 2
        assert "already running" in capsys.readouterr().err
    finally:
        first.stop()
    assert not first.running


def test_a_server_that_ignores_sigterm_is_killed_with_its_group(tmp_path: Path) -> None:
    d = fake_server(tmp_path, "loaded")
    run = ServerRun([str(d / "llama-server")], env={**os.environ, "FAKE_LLAMA_HANG": "1"})
    run.start()
    assert run.wait(30).loaded
    pid = run.pid
    assert run.stop(grace=0.5) == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # nothing of its process group is left


def test_ctrl_c_stops_the_server(tmp_path: Path, model: Path) -> None:
    """`fitplan launch` without --check serves until Ctrl+C, then stops the server: no orphan is left."""
    d = fake_server(tmp_path, "loaded")
    env = {**os.environ, "PYTHONPATH": str(REPO / "app")}
    p = subprocess.Popen(
        [sys.executable, "-m", "fitplan", "launch", str(model), *FLAGS, "--llama-bin", str(d), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert p.stderr is not None
    pid = 0
    for line in p.stderr:
        if "Ctrl+C stops it" in line:
            pid = int(line.split("(pid ")[1].split(")")[0])
            break
    assert pid
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "every term within" in out
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"llama-server (pid {pid}) outlived fitplan")


def test_starting_a_missing_program_is_a_fitplan_error(tmp_path: Path) -> None:
    with pytest.raises(FitplanError, match="could not start"):
        ServerRun([str(tmp_path / "gone")]).start()


# -- the real llama-server ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded model (a sparse file: its header, then a hole), written once for the real launches."""
    sparse = load_tool("tools/groundtruth/sparse_models.py")
    return Path(sparse.generate("llama-3.1-8b", tmp_path_factory.mktemp("models"), vocab="spm"))


def _real_flags() -> list[str]:
    return [*FLAGS, "--port", str(free_port()), "--llama-bin", str(REAL_BIN), "--check", "--quiet"]


@pytest.mark.llamacpp
@needs_build
def test_real_launch_is_within_the_band_and_saves_a_check(
    tmp_path: Path, real_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "check.json"
    assert main(["launch", str(real_model), *_real_flags(), "--save-check", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "every term within the estimate's band" in out, out
    back = load_check(saved)
    assert back.build.text.startswith("version: ") and back.log.breakdown and back.devices


@pytest.mark.llamacpp
@needs_build
def test_real_out_of_memory(tmp_path: Path, real_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 8 GiB of address space: the 5 GB mapped file fits, a 16 GiB K/V cache (-c 131072) does not
    d = tmp_path / "limited"
    d.mkdir()
    exe = d / "llama-server"
    exe.write_text(f'#!/bin/sh\nulimit -v {8 << 20}\nexec "{REAL_SERVER}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    flags = [x if x != "4096" else "131072" for x in _real_flags()]
    flags[flags.index("--llama-bin") + 1] = str(d)
    assert main(["launch", str(real_model), *flags]) == 1
    assert "out of memory" in capsys.readouterr().err


@pytest.mark.llamacpp
@needs_build
def test_real_unknown_flag_and_port_in_use(
    tmp_path: Path, real_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # -cnv is llama-cli's: fitplan keeps it in the command, llama-server refuses it
    assert main(["launch", str(real_model), *_real_flags(), "-cnv"]) == 2
    assert "does not accept -cnv" in capsys.readouterr().err
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        flags = _real_flags()
        flags[flags.index("--port") + 1] = str(busy.getsockname()[1])
        assert main(["launch", str(real_model), *flags]) == 2
    assert "is in use" in capsys.readouterr().err
