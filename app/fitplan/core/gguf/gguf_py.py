"""gguf-py's tables (`gguf.constants`) without the rest of the package.

`import gguf` loads its reader and writer, numpy and yaml, a tenth of a second the command line does not need to
read a few enums and a size table. `gguf/constants.py` imports only the standard library, so it is loaded on its
own under its usual name; a later `import gguf` finds it in `sys.modules` and uses the same module (the same enum
classes). If a gguf-py release ever makes that impossible, the package is imported the ordinary way.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["gguf_constants"]

_NAME = "gguf.constants"


def gguf_constants() -> ModuleType:
    """The `gguf.constants` module, loaded without `gguf/__init__.py` when the package is not imported yet."""
    loaded = sys.modules.get(_NAME)
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec("gguf")  # finds the package without running it
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(roots[0]) / "constants.py" if roots else None
    single = (
        importlib.util.spec_from_file_location(_NAME, path) if path is not None and path.is_file() else None
    )
    if single is None or single.loader is None:
        return importlib.import_module(_NAME)
    module = importlib.util.module_from_spec(single)
    sys.modules[_NAME] = module
    try:
        single.loader.exec_module(module)
    except Exception:  # noqa: BLE001 - a release whose constants need the package: import it as usual
        del sys.modules[_NAME]
        return importlib.import_module(_NAME)
    return module
