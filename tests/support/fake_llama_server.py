"""A stand-in for llama-server that replays a log recorded from the real one (tests/fixtures/llamacpp/launch/*.json).

Run as `python fake_llama_server.py RECORDING [llama-server args...]`, usually through a `llama-server` wrapper
script written by the tests. `--version` prints the recorded version. Otherwise it writes the command it was given
to `<RECORDING>.args` next to the wrapper (FAKE_LLAMA_ARGS), replays the recorded `load` lines, and then: for a
recording that failed, exits with its exit code; for one that loaded, waits for SIGTERM or SIGINT, replays the
`exit` lines (the memory breakdown) and exits 0. FAKE_LLAMA_HANG=1 ignores SIGTERM (to test the kill after the
grace period).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    rec = json.loads(Path(argv[0]).read_text())
    args = argv[1:]
    if "--version" in args:
        print(rec["version"], file=sys.stderr)
        return 0
    out_args = os.environ.get("FAKE_LLAMA_ARGS")
    if out_args:
        Path(out_args).write_text(json.dumps(args))
    stopped = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopped
        stopped = True

    hang = os.environ.get("FAKE_LLAMA_HANG") == "1"
    signal.signal(signal.SIGTERM, signal.SIG_IGN if hang else stop)
    signal.signal(signal.SIGINT, stop)
    for line in rec["load"]:
        print(line, flush=True)
    if rec.get("returncode", 0) != 0:
        return int(rec["returncode"])
    while not stopped:
        time.sleep(0.05)
    for line in rec.get("exit", []):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
