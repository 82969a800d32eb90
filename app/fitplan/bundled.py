"""Where the files fitplan ships with are: icons and example models.

One rule for every way fitplan runs: an installed wheel and the PyInstaller app carry them inside the package
(`fitplan/data/icons/`, `fitplan/data/examples/`, copied from the repository's `resources/` at build time by
setup.py and packaging/fitplan.spec); a source checkout or an editable install reads `resources/` in place.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent

#: The icon's theme name (the .desktop file's Icon=, the file names under resources/icons/).
ICON_NAME = "io.github.fitplan.Fitplan"

#: Square sizes the icon is rendered at (tools/make_icons.py).
ICON_SIZES: tuple[int, ...] = (16, 24, 32, 48, 64, 128, 256, 512)


def resources_dir() -> Path:
    """The folder holding `icons/` and `examples/`."""
    packaged = _PACKAGE / "data"
    if (packaged / "icons").is_dir():
        return packaged
    return _PACKAGE.parent.parent / "resources"


def examples_dir() -> Path:
    """The header-only example models (written by tools/make_examples.py)."""
    return resources_dir() / "examples"


def icons_dir() -> Path:
    return resources_dir() / "icons"


def icon_png(size: int) -> Path:
    """The application icon rendered at `size` x `size` pixels (one of ICON_SIZES)."""
    if size not in ICON_SIZES:
        raise ValueError(f"no {size}px icon; sizes: {', '.join(map(str, ICON_SIZES))}")
    return icons_dir() / f"{ICON_NAME}-{size}.png"


def icon_svg() -> Path:
    return icons_dir() / f"{ICON_NAME}.svg"
