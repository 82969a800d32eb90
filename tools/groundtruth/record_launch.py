"""Record real llama-server launches for `fitplan launch`'s tests: the log of a load and of each kind of failure.

Each recording is `tests/fixtures/launch/<case>.json`: the llama.cpp commit and build, `llama-server --version`, the
command (the program and the model by name), the lines printed until the model was loaded or the launch failed
(`load`), the lines printed after SIGTERM (`exit`: the memory breakdown), and the exit code. The tests replay them
with `tests/support/fake_llama_server.py` where no build is present.

Cases, on the sparse llama-3.1-8b of `sparse_models.py` (spm vocabulary; a few MB on disk):
  loaded        fitplan's planned command for -c 4096 (no repacking, no warm-up: nothing of the file is read)
  repack        the same with CPU repacking on: its CPU_REPACK buffer is allocated besides the mapped file
  oom           the first at -c 131072 under `ulimit -v` 8 GiB: the 16 GiB K/V cache cannot be allocated
  unknown-flag  -cnv, an argument of llama-cli that llama-server does not have (fitplan keeps it in the command)
  port-in-use   the port of a socket already listening

Usage: .venv/bin/python tools/groundtruth/record_launch.py --build BUILD_DIR [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sparse_models

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "launch"
MODEL = "llama-3.1-8b"
sys.path.insert(0, str(REPO / "app"))

from fitplan import LLAMA_CPP_BUILD, LLAMA_CPP_COMMIT  # noqa: E402
from fitplan.core.launch.server_log import loaded_in, parse_version, strip_prefix  # noqa: E402

OOM_LIMIT_KIB = 8 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def planned(model: Path, flags: list[str]) -> list[str]:
    """fitplan's command for the model and flags (`fitplan command --json`), as `fitplan launch` runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "fitplan", "command", str(model), *flags, "--host-ram", "64GiB", "--json"],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(REPO / "app")},
    )  # fmt: skip
    return [*json.loads(done.stdout)["argv"], "-lv", "4"]


def run(
    binary: Path, argv: list[str], ulimit_kib: int | None = None, timeout: float = 300
) -> dict[str, object]:
    cmd = [str(binary), *argv[1:]]
    if ulimit_kib is not None:
        cmd = ["sh", "-c", f"ulimit -v {ulimit_kib}; exec {shlex.join(cmd)}"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    assert p.stdout is not None
    load: list[str] = []
    deadline = time.time() + timeout
    loaded = False
    for raw in p.stdout:
        load.append(raw.rstrip("\n"))
        loaded = loaded or loaded_in(strip_prefix(load[-1]))
        # the load ends with the server idle, listening (printed just after "model loaded")
        if (loaded and "all slots are idle" in load[-1]) or time.time() > deadline:
            break
    if p.poll() is None and loaded:
        time.sleep(1.0)
        p.send_signal(signal.SIGTERM)
    rest, _ = p.communicate(timeout=60)
    exit_lines = rest.splitlines()
    if not loaded:  # a failure: everything it printed is the load
        load, exit_lines = load + exit_lines, []
    return {"load": load, "exit": exit_lines, "returncode": 0 if loaded else p.returncode}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/fitplan-launch-recordings"))
    args = ap.parse_args(argv)
    binary = args.build / "bin" / "llama-server"
    args.work.mkdir(parents=True, exist_ok=True)
    model = sparse_models.generate(MODEL, args.work, vocab="spm")
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False)
    version_text = (version.stdout + version.stderr).strip()
    build = parse_version(version_text)
    common = ["-nr", "--no-warmup", "--host", "127.0.0.1", "-t", "2"]
    cases: dict[str, tuple[list[str], int | None, socket.socket | None]] = {}
    port = free_port()
    cases["loaded"] = (planned(model, ["-c", "4096", *common, "--port", str(port)]), None, None)
    # repacking on (no -nr): the weights CPU_REPACK takes are allocated besides the mapped file
    repack = [x for x in common if x != "-nr"]
    cases["repack"] = (planned(model, ["-c", "4096", *repack, "--port", str(port)]), None, None)
    cases["oom"] = (planned(model, ["-c", "131072", *common, "--port", str(port)]), OOM_LIMIT_KIB, None)
    cases["unknown-flag"] = ([*cases["loaded"][0], "-cnv"], None, None)  # llama-cli's, not the server's
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    busy_port = busy.getsockname()[1]
    in_use = [x if x != str(port) else str(busy_port) for x in cases["loaded"][0]]
    cases["port-in-use"] = (in_use, None, busy)
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (cmd, limit, _keep) in cases.items():
        rec = run(binary, cmd, limit)
        shown = [Path(cmd[0]).name, *[Path(x).name if x == str(model) else x for x in cmd[1:]]]
        doc = {
            # a build from the source archive does not know its commit: the archive's (fitplan targets it)
            "llama_cpp": {
                "commit": build.commit or LLAMA_CPP_COMMIT,
                "build": build.build or LLAMA_CPP_BUILD,
            },
            "recorded_with": "tools/groundtruth/record_launch.py",
            "model": {"generator": "tools/groundtruth/sparse_models.py", "name": MODEL, "vocab": "spm"},
            "command": shown,
            "ulimit_v_kib": limit,
            "version": version_text,
            **rec,
        }
        text = json.dumps(doc, indent=1).replace(str(args.work) + "/", "$MODELS/") + "\n"
        (OUT / f"{name}.json").write_text(text)
        print(
            name,
            "returncode",
            rec["returncode"],
            "lines",
            len(rec["load"]),
            "+",
            len(rec["exit"]),
            flush=True,
        )  # type: ignore[arg-type]
    busy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
