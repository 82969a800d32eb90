#!/usr/bin/env python3
"""One entry point for a fresh machine with only Python 3.11+.

    python3 tools/dev.py run     set up .venv if needed and open the planner window
    python3 tools/dev.py test    set up .venv (and Xvfb for screenshot tests) and run lint, types and every test

Only the standard library is used here, so it runs before anything is installed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".fitplan-installed"

# Debian packages Qt's xcb platform and the screenshot tests need (Xvfb, libxcb-cursor0 and friends).
APT_PACKAGES = (
    "xvfb", "xauth", "libxcb-cursor0", "libxkbcommon-x11-0", "libxcb-icccm4", "libxcb-image0",
    "libxcb-keysyms1", "libxcb-randr0", "libxcb-render-util0", "libxcb-shape0", "libxcb-xinerama0",
    "libxcb-xkb1", "libegl1", "libgl1", "libfontconfig1", "libdbus-1-3", "fonts-dejavu-core",
)


def run(cmd: list[str], **kw: object) -> int:
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=ROOT, **kw)  # type: ignore[arg-type]


def ensure_venv(extras: str) -> None:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == digest:
        return
    if not PY.exists():
        if run([sys.executable, "-m", "venv", str(VENV)]) != 0:
            sys.exit("could not create the virtual environment")
    run([str(PY), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    target = f".[{extras}]" if extras else "."
    if run([str(PY), "-m", "pip", "install", "-q", "-e", target]) != 0:
        sys.exit("pip install failed")
    STAMP.write_text(digest)


def ensure_system_packages() -> None:
    """Install Xvfb and Qt's xcb libraries on Debian-like systems when we may (root, apt present)."""
    if sys.platform != "linux" or shutil.which("apt-get") is None:
        return
    missing = [p for p in APT_PACKAGES if subprocess.call(
        ["dpkg", "-s", p], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) != 0]
    if not missing:
        return
    if os.geteuid() != 0:
        print("note: screenshot tests need: apt-get install " + " ".join(missing), file=sys.stderr)
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env, stdout=subprocess.DEVNULL)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env, stdout=subprocess.DEVNULL)


def cmd_run(args: list[str]) -> int:
    ensure_venv("")
    return run([str(PY), "-m", "fitplan", *args])


def cmd_test(args: list[str]) -> int:
    ensure_venv("dev")
    ensure_system_packages()
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    rc = run([str(PY), "-m", "ruff", "check", "app", "tests", "bench", "tools"])
    rc |= run([str(PY), "-m", "mypy"])
    rc |= run([str(PY), "-m", "pytest", "-q", *args], env=env)
    return 1 if rc else 0


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("run", "test"):
        print(__doc__)
        return 2
    return {"run": cmd_run, "test": cmd_test}[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    raise SystemExit(main())
