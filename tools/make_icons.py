#!/usr/bin/env python3
"""Render the application icon from its SVG source into the files packagers need.

    python tools/make_icons.py [--out DIR]

Reads resources/icons/io.github.fitplan.Fitplan.svg and writes next to it (or into DIR):

* io.github.fitplan.Fitplan-{16,24,32,48,64,128,256,512}.png  (Linux hicolor theme, window icon)
* io.github.fitplan.Fitplan.ico   (Windows: PNG-compressed entries 16..256)
* io.github.fitplan.Fitplan.icns  (macOS: PNG entries 16..512 and their @2x variants up to 1024)

Rendering uses Qt's QSvgRenderer (PySide6, already a dependency) on the offscreen platform; the ICO and ICNS
containers are written here with the standard library. Commit the generated files.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "app"))

from fitplan.bundled import ICON_NAME, ICON_SIZES  # noqa: E402

SOURCE = ROOT / "resources" / "icons" / f"{ICON_NAME}.svg"

#: ICO entries (Windows shows 16..256; 256 is the largest the format allows).
ICO_SIZES: tuple[int, ...] = (16, 24, 32, 48, 64, 128, 256)

#: ICNS element types holding PNG data, with their pixel size (Apple's "icns" format: 'icp4'..'ic14').
ICNS_TYPES: tuple[tuple[bytes, int], ...] = (
    (b"icp4", 16),
    (b"icp5", 32),
    (b"icp6", 64),
    (b"ic07", 128),
    (b"ic08", 256),
    (b"ic09", 512),
    (b"ic11", 32),
    (b"ic12", 64),
    (b"ic13", 256),
    (b"ic14", 512),
    (b"ic10", 1024),
)


def render_pngs(svg: Path, sizes: tuple[int, ...]) -> dict[int, bytes]:
    """PNG bytes of `svg` rendered at each size (square, transparent background, antialiased)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication([])
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"{svg}: not a valid SVG")
    out: dict[int, bytes] = {}
    for size in sizes:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(0)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        renderer.render(painter)
        painter.end()
        data = QByteArray()
        buf = QBuffer(data)
        buf.open(QIODevice.OpenModeFlag.WriteOnly)
        if not image.save(buf, "PNG"):  # type: ignore[call-overload]
            raise SystemExit(f"could not encode the {size}px PNG")
        buf.close()
        out[size] = bytes(data.data())
    return out


def ico_bytes(pngs: dict[int, bytes]) -> bytes:
    """A Windows .ico whose entries are PNG streams (supported since Windows Vista)."""
    header = struct.pack("<HHH", 0, 1, len(pngs))
    offset = 6 + 16 * len(pngs)
    entries = b""
    payload = b""
    for size, png in sorted(pngs.items()):
        dim = 0 if size >= 256 else size  # 0 means 256 in ICONDIRENTRY
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(png), offset + len(payload))
        payload += png
    return header + entries + payload


def icns_bytes(pngs: dict[int, bytes]) -> bytes:
    """A macOS .icns made of PNG elements."""
    body = b""
    for kind, size in ICNS_TYPES:
        png = pngs[size]
        body += kind + struct.pack(">I", 8 + len(png)) + png
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=SOURCE.parent, help="output folder (default: next to the SVG)"
    )
    args = parser.parse_args(argv)
    sizes = tuple(sorted({*ICON_SIZES, *ICO_SIZES, *(s for _, s in ICNS_TYPES)}))
    pngs = render_pngs(SOURCE, sizes)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    for size in ICON_SIZES:
        (out / f"{ICON_NAME}-{size}.png").write_bytes(pngs[size])
    (out / f"{ICON_NAME}.ico").write_bytes(ico_bytes({s: pngs[s] for s in ICO_SIZES}))
    (out / f"{ICON_NAME}.icns").write_bytes(icns_bytes(pngs))
    print(f"wrote {len(ICON_SIZES)} PNGs, {ICON_NAME}.ico and {ICON_NAME}.icns to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
