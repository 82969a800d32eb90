"""Entry point of the PyInstaller app: one program, two executables.

`fitplan-gui` (no console window on Windows, the macOS .app) opens the planner window; `fitplan` is the command
line, exactly like the `fitplan` script pip installs (no arguments also opens the window).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> int:
    if Path(sys.executable).stem.lower().endswith("-gui"):
        from fitplan.gui.app import main as gui_main

        return int(gui_main(sys.argv[1:]))
    from fitplan.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    raise SystemExit(main())
