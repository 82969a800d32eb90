"""The mouse wheel scrolls: it changes a value only on the control that has the keyboard focus.

Over a spin box, combo box or slider that the user has not clicked or tabbed into, the wheel scrolls the area the
control sits in (the settings column), as it does over a label. One application-wide event filter holds the rule for
every window and dialog; the controls it guards also stop taking the focus from the wheel alone.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollBar,
    QWidget,
)

_GUARD_NAME = "fitplan-wheel-guard"


def is_value_control(widget: QObject) -> bool:
    """A control whose value the wheel would change: spin boxes, combo boxes and sliders (not scroll bars)."""
    return isinstance(widget, (QAbstractSpinBox, QComboBox, QAbstractSlider)) and not isinstance(
        widget, QScrollBar
    )


def _scroll_area_of(widget: QWidget) -> QAbstractScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea):
            return parent
        parent = parent.parentWidget()
    return None


def hold_focus_from_wheel(widget: QWidget) -> None:
    """The wheel alone does not give `widget` the focus (a click or Tab does)."""
    if is_value_control(widget) and widget.focusPolicy() == Qt.FocusPolicy.WheelFocus:
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)


class WheelGuard(QObject):
    """The application's event filter: a wheel turn over an unfocused value control scrolls its area instead."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Type.Polish and isinstance(watched, QWidget):
            hold_focus_from_wheel(watched)
        elif kind == QEvent.Type.Wheel and is_value_control(watched):
            assert isinstance(watched, QWidget)
            if watched.hasFocus():
                return False
            area = _scroll_area_of(watched)
            if area is not None:
                bar = area.verticalScrollBar()
                if bar is not None and bar.maximum() > bar.minimum():
                    QCoreApplication.sendEvent(bar, event)
            return True  # the value stays as the user set it
        return False


def install_wheel_guard(root: QWidget | None = None) -> WheelGuard | None:
    """Install the guard on the application once; the controls already under `root` stop taking wheel focus."""
    app = QApplication.instance()
    if app is None:
        return None
    guard = app.findChild(WheelGuard, _GUARD_NAME)
    if guard is None:
        guard = WheelGuard(app)
        guard.setObjectName(_GUARD_NAME)
        app.installEventFilter(guard)
    if root is not None:
        for widget in root.findChildren(QWidget):
            hold_focus_from_wheel(widget)
    return guard
