"""Build hook: ship the repository's `resources/` folder (icons, example models) inside the package.

Everything else is configured in pyproject.toml. In a wheel the files land in `fitplan/data/` (next to the
package's own data: `fitplan/data/examples/`, `fitplan/data/icons/`); an editable install and a source checkout read
`resources/` in place. `fitplan.bundled.resources_dir()` finds either.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
RESOURCES = ROOT / "resources"
#: Files of resources/ that are sources for generated files, not needed at run time.
SKIP_SUFFIXES = (".xcf", ".kra", ".psd")


class BuildPyWithResources(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode or not RESOURCES.is_dir():
            return
        target = Path(self.build_lib) / "fitplan" / "data"
        for src in sorted(RESOURCES.rglob("*")):
            if src.is_file() and src.suffix not in SKIP_SUFFIXES and "__pycache__" not in src.parts:
                dst = target / src.relative_to(RESOURCES)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)


setup(cmdclass={"build_py": BuildPyWithResources})
