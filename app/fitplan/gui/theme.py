"""Colours and small look helpers, in one place: the term palette (Okabe-Ito, colour-blind safe) and verdict colours."""

from __future__ import annotations

import html

from PySide6.QtGui import QColor, QGuiApplication, QPalette

from fitplan.core.base.results import TermKind
from fitplan.gui.backend import VerdictLevel

#: Okabe & Ito (2008) "Color Universal Design" palette, one colour per term kind.
TERM_COLOURS: dict[TermKind, str] = {
    TermKind.WEIGHTS: "#0072B2",  # blue
    TermKind.KV: "#E69F00",  # orange
    TermKind.RECURRENT: "#CC79A7",  # reddish purple
    TermKind.COMPUTE: "#56B4E9",  # sky blue
    TermKind.OUTPUT: "#F0E442",  # yellow
    TermKind.MMPROJ: "#009E73",  # bluish green
    TermKind.DRAFT: "#D55E00",  # vermillion
    TermKind.RESERVE: "#999999",  # grey (Okabe-Ito black, lightened to show on dark themes)
}

VERDICT_COLOURS: dict[str, tuple[str, str]] = {  # (light theme, dark theme) backgrounds
    VerdictLevel.FITS: ("#d4f0e2", "#1f4d3a"),
    VerdictLevel.OFFLOAD: ("#fbe8c8", "#5a4318"),
    VerdictLevel.NO_FIT: ("#f7d3cc", "#5c2620"),
}

CAPACITY_COLOUR = "#D55E00"
MARGIN_COLOUR = "#E69F00"
OTHERS_COLOUR = "#BBBBBB"  # memory other programs hold (device bars)
CONTEXT_LINE_COLOUR = "#CC79A7"


def is_dark() -> bool:
    app = QGuiApplication.instance()
    if not isinstance(app, QGuiApplication):
        return False
    window = app.palette().color(QPalette.ColorRole.Window)
    return window.lightness() < 128


def verdict_colour(level: str) -> QColor:
    light, dark = VERDICT_COLOURS.get(level, ("#e0e0e0", "#404040"))
    return QColor(dark if is_dark() else light)


def foreground() -> QColor:
    app = QGuiApplication.instance()
    if isinstance(app, QGuiApplication):
        return app.palette().color(QPalette.ColorRole.WindowText)
    return QColor("black")


def plain_tip(text: str) -> str:
    """A tooltip that shows `text` literally: Qt renders a tooltip that looks like HTML as rich text, and tooltips
    quote model names and paths from strangers' files."""
    if not text:
        return ""
    return "<qt><div style='white-space:pre-wrap'>" + html.escape(text) + "</div></qt>"


def background() -> QColor:
    app = QGuiApplication.instance()
    if isinstance(app, QGuiApplication):
        return app.palette().color(QPalette.ColorRole.Base)
    return QColor("white")


def background_fill() -> QColor:
    """The chart's background, nearly opaque: behind a label drawn on the plot."""
    colour = QColor(background())
    colour.setAlpha(225)
    return colour


def configure_pyqtgraph() -> None:
    """pyqtgraph's look for this theme (called once pyqtgraph is loaded: the chart builds its plot after the first
    paint)."""
    import pyqtgraph as pg

    pg.setConfigOptions(antialias=True, background=None, foreground="w" if is_dark() else "k")
