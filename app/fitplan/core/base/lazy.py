"""numpy, imported on first use.

The planner and `fitplan plan` evaluate one context at a time in plain integers; only the context curves (the
window's chart, `estimate --curve`) and the GGUF reader's bulk string walk use numpy arrays. A module that uses numpy
only inside functions takes `np` from here, so that starting the command line does not import numpy (tens of
milliseconds, a third of `fitplan plan`'s start) unless an array is built:

    from typing import TYPE_CHECKING

    if TYPE_CHECKING:
        import numpy as np
        from numpy.typing import NDArray
    else:
        from fitplan.core.base.lazy import np

Module-level code must not touch `np` (that would import numpy at once); annotations are strings
(`from __future__ import annotations`) and array type aliases are written as strings.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["np"]


class _LazyModule:
    """A module's attributes, imported on the first access; each is then kept on this object."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _module(self) -> ModuleType:
        return importlib.import_module(self._name)

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._module(), attr)
        setattr(self, attr, value)
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


np: Any = _LazyModule("numpy")
