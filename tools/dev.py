#!/usr/bin/env python3
"""One entry point for a fresh machine with only Python 3.11+.

    python3 tools/dev.py run     set up .venv if needed and open the planner window
    python3 tools/dev.py test    set up .venv (and Xvfb for screenshot tests) and run lint, format, import
                                 contracts, types and every test

`test` passes further arguments to pytest: `python3 tools/dev.py test -m "not slow"` skips the wheel and
desktop-app builds, `python3 tools/dev.py test tests/cli/test_cli.py -x` runs one file.
Only the standard library is used here, so it runs before anything is installed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".fitplan-installed"

# Debian packages Qt's xcb platform and the screenshot tests need (Xvfb, libxcb-cursor0 and friends), what
# PyInstaller needs on Linux (binutils: objdump), and the validators of the desktop entry and AppStream metainfo.
APT_PACKAGES = (
    "xvfb",
    "xauth",
    "libxcb-cursor0",
    "libxkbcommon-x11-0",
    "libxcb-icccm4",
    "libxcb-image0",
    "libxcb-keysyms1",
    "libxcb-randr0",
    "libxcb-render-util0",
    "libxcb-shape0",
    "libxcb-xinerama0",
    "libxcb-xkb1",
    "libegl1",
    "libgl1",
    "libfontconfig1",
    "libdbus-1-3",
    "fonts-dejavu-core",
    "binutils",
    "desktop-file-utils",
    "appstream",
)

#: What ruff checks (those that exist: a fresh clone has no empty folders).
LINT_PATHS = ("app", "tests", "bench", "tools", "packaging", "setup.py")

#: pytest's exit status when it collected no tests.
PYTEST_NO_TESTS = 5


def run(cmd: list[str], **kw: object) -> int:
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=ROOT, **kw)  # type: ignore[arg-type]


def ensure_venv(extras: str) -> None:
    """Install the project (editable) with `extras` into .venv, unless the last install already covers them.

    The stamp file records a digest of the packaging files and the extras installed with them, so switching between
    `run` (no extras) and `test` (dev) does not reinstall, while an edited pyproject.toml or setup.py does.
    """
    digest = hashlib.sha256(
        (ROOT / "pyproject.toml").read_bytes() + (ROOT / "setup.py").read_bytes()
    ).hexdigest()
    wanted = {e for e in extras.split(",") if e}
    installed: set[str] = set()
    if STAMP.exists():
        stamp_digest, _, stamp_extras = STAMP.read_text().partition("\n")
        if stamp_digest == digest:
            installed = {e for e in stamp_extras.strip().split(",") if e}
            if wanted <= installed:
                return
    if not PY.exists() and run([sys.executable, "-m", "venv", str(VENV)]) != 0:
        sys.exit("could not create the virtual environment")
    run([str(PY), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    extras_all = sorted(wanted | installed)
    target = f".[{','.join(extras_all)}]" if extras_all else "."
    if run([str(PY), "-m", "pip", "install", "-q", "-e", target]) != 0:
        sys.exit("pip install failed")
    STAMP.write_text(digest + "\n" + ",".join(extras_all))


def ensure_system_packages() -> None:
    """Install Xvfb and Qt's xcb libraries on Debian-like systems when we may (root, apt present)."""
    if sys.platform != "linux" or shutil.which("apt-get") is None:
        return
    missing = [
        p
        for p in APT_PACKAGES
        if subprocess.call(["dpkg", "-s", p], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) != 0
    ]
    if not missing:
        return
    if os.geteuid() != 0:
        print("note: screenshot tests need: apt-get install " + " ".join(missing), file=sys.stderr)
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env, stdout=subprocess.DEVNULL)
    run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        env=env,
        stdout=subprocess.DEVNULL,
    )


def cmd_run(args: list[str]) -> int:
    ensure_venv("")
    return run([str(PY), "-m", "fitplan", *args])


def timed(label: str, cmd: list[str], **kw: object) -> int:
    t0 = time.monotonic()
    rc = run(cmd, **kw)
    print(f"== {label}: {'ok' if rc == 0 else f'exit {rc}'} in {time.monotonic() - t0:.0f} s", flush=True)
    return rc


def cmd_test(args: list[str]) -> int:
    t0 = time.monotonic()
    ensure_venv("dev")
    ensure_system_packages()
    print(f"== setup: {time.monotonic() - t0:.0f} s", flush=True)
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    lint = [p for p in LINT_PATHS if (ROOT / p).exists()]
    failed = []
    if timed("ruff", [str(PY), "-m", "ruff", "check", *lint]) != 0:
        failed.append("ruff")
    if timed("ruff format", [str(PY), "-m", "ruff", "format", "--check", "-q", *lint]) != 0:
        failed.append("ruff format")
    if timed("import contracts", [str(BIN / "lint-imports"), "--no-cache"], stdout=subprocess.DEVNULL) != 0:
        run([str(BIN / "lint-imports"), "--no-cache"])  # again, to show what broke
        failed.append("import contracts")
    if timed("mypy", [str(PY), "-m", "mypy"]) != 0:
        failed.append("mypy")
    if timed("complexity", [str(PY), str(ROOT / "tools" / "complexity.py")]) != 0:
        failed.append("complexity")
    rc = timed("pytest", [str(PY), "-m", "pytest", "-q", "--durations=10", *args], env=env)
    if rc == PYTEST_NO_TESTS:
        # A run that tested nothing must not pass CI silently; a hand-picked selection says what it matched.
        print("pytest collected no tests: check the paths or -k/-m selection", file=sys.stderr)
    if rc != 0:
        failed.append("pytest")
    print(f"== total: {time.monotonic() - t0:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def main() -> int:
    if sys.version_info < (3, 11):  # noqa: UP036  (this script must explain itself on an older Python)
        sys.exit(f"fitplan needs Python 3.11 or newer; this is {sys.version.split()[0]} ({sys.executable})")
    if len(sys.argv) < 2 or sys.argv[1] not in ("run", "test"):
        print(__doc__)
        return 2
    return {"run": cmd_run, "test": cmd_test}[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    raise SystemExit(main())
