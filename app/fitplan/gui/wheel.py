"""The mouse wheel scrolls: it changes a value only on the control that has the keyboard focus.

Over a spin box, combo box or slider that the user has not clicked or tabbed into, the wheel scrolls the area the
control sits in (the settings column), as it does over a label. One event filter holds the rule; it watches the
value controls of a window only (an application-wide filter would run for every event of every widget, a cost
while the chart is dragged), and the controls it guards also stop taking the focus from the wheel alone.
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
    QTabBar,
    QWidget,
)

_GUARD_NAME = "fitplan-wheel-guard"


def is_value_control(widget: QObject) -> bool:
    """A control whose value the wheel would change: spin boxes, combo boxes, sliders (not scroll bars) and tab
    bars (the wheel would switch the chart for the launch tab)."""
    return isinstance(widget, (QAbstractSpinBox, QComboBox, QAbstractSlider, QTabBar)) and not isinstance(
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
    """The value controls' event filter: a wheel turn over an unfocused one scrolls its area instead."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Wheel and is_value_control(watched):
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


def install_wheel_guard(root: QWidget) -> WheelGuard | None:
    """Guard every value control under `root` (a window or a dialog, once its controls are made): the wheel scrolls
    past it unless it has the focus, and it does not take the focus from the wheel."""
    app = QApplication.instance()
    if app is None:
        return None
    guard = app.findChild(WheelGuard, _GUARD_NAME)
    if guard is None:
        guard = WheelGuard(app)
        guard.setObjectName(_GUARD_NAME)
    for widget in root.findChildren(QWidget):
        if is_value_control(widget):
            hold_focus_from_wheel(widget)
            widget.removeEventFilter(guard)  # installed once per control
            widget.installEventFilter(guard)
    return guard
