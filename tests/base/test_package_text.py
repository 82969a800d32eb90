"""`package_text` reads fitplan's bundled files as `importlib.resources` does, without importing it for a package
that is a folder, and through it otherwise."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from fitplan.core.base import files
from fitplan.core.base.files import package_text

BUNDLED = (
    "data/gpu_catalog.json",
    "data/gpu_speed.json",
    "data/speed_calibration.json",
    "data/accuracy_bands.json",
)


@pytest.mark.parametrize("relpath", BUNDLED)
def test_a_bundled_file_reads_as_importlib_resources_reads_it(relpath: str) -> None:
    text = package_text(relpath)
    assert text and text == resources.files("fitplan").joinpath(relpath).read_text(encoding="utf-8")


def test_without_the_folder_it_reads_through_importlib_resources(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(files, "_PACKAGE_DIR", str(tmp_path / "not-there"))
    assert package_text(BUNDLED[0]) == resources.files("fitplan").joinpath(BUNDLED[0]).read_text(
        encoding="utf-8"
    )


def test_a_missing_file_is_an_error() -> None:
    with pytest.raises(FileNotFoundError):
        package_text("data/no-such-file.json")
