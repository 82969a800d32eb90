"""The GPUs a user has in mind (issue 24, class 9): the window takes what `--assume-gpu` takes, through the core's
parser; the catalog is grouped by vendor and searchable; typed junk gets the core's one-line message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from fitplan.core.base.devices import GIB
from fitplan.core.base.errors import FitplanError
from fitplan.core.hardware.catalog import assumed_devices, catalog_groups, load_catalog, parse_assumed_gpu
from fitplan.gui.main_window import MainWindow

from .conftest import LLAMA, NO_GPU, make_window, wait_settled

pytestmark = [pytest.mark.gui]


@pytest.fixture
def bare(qtbot: Any, private_config: Path) -> Iterator[MainWindow]:
    w: MainWindow = make_window(qtbot, NO_GPU, private_config)  # type: ignore[assignment]
    w.show()
    w.planner.start(str(LLAMA))
    wait_settled(qtbot, w)
    yield w
    w.close()


def _type(window: MainWindow, text: str) -> None:
    box = window.hardware.catalog
    box.setEditText(text)
    window.hardware.add_catalog.click()


@pytest.mark.parametrize("spec", ["2x RTX 3060", "H100 80GB", "my card=11.5GiB", "24GiB"])
def test_the_window_takes_what_assume_gpu_takes(qtbot: Any, bare: MainWindow, spec: str) -> None:
    _type(bare, spec)
    out = wait_settled(qtbot, bare)
    gpus = [d for d in out.estimate.devices if d.device.kind.value != "cpu"]
    cli = assumed_devices([spec])  # what `fitplan plan --assume-gpu SPEC` plans for
    assert [(d.device.total_bytes, d.device.vendor) for d in gpus] == [(d.total_bytes, d.vendor) for d in cli]
    assert not bare.hardware.spec_error.isVisible()


def test_typed_junk_gets_the_cores_one_line_message(qtbot: Any, bare: MainWindow) -> None:
    before = bare.hardware.hypothetical()
    _type(bare, "blorp 9000")
    with pytest.raises(FitplanError) as e:
        parse_assumed_gpu("blorp 9000")
    assert bare.hardware.spec_error.isVisible()
    assert bare.hardware.spec_error.text() == str(e.value) and "\n" not in str(e.value)
    assert bare.hardware.hypothetical() == before  # nothing added
    assert bare.hardware.catalog.currentText() == "blorp 9000"  # the text stays, to be corrected
    _type(bare, "99x RTX 3060")  # more GPUs than llama.cpp can use: the CLI's message too
    assert "1 to 16" in bare.hardware.spec_error.text()


def test_the_catalog_is_grouped_and_searchable(qtbot: Any, bare: MainWindow) -> None:
    box = bare.hardware.catalog
    model = box.model()
    headings = [model.index(r, 0).data() for r in range(model.rowCount()) if not model.flags(model.index(r, 0))
                & Qt.ItemFlag.ItemIsSelectable]  # fmt: skip
    assert headings == [f"— {title} —" for title, _ in catalog_groups()]
    assert "— NVIDIA data center —" in headings and "— Apple Silicon (unified memory) —" in headings
    completer = box.completer()
    completer.setCompletionPrefix("3060")
    found = [completer.completionModel().index(i, 0).data() for i in range(completer.completionCount())]
    assert "GeForce RTX 3060 (12 GiB)" in found and "GeForce RTX 3060 Ti (8 GiB)" in found
    # a picked entry is added as the catalog has it
    box.setCurrentIndex(box.findText("GeForce RTX 3060 (12 GiB)"))
    bare.hardware.add_catalog.click()
    out = wait_settled(qtbot, bare)
    assert out.estimate.devices[0].device.total_bytes == 12 * GIB


def test_every_catalog_choice_reads_back_as_itself() -> None:
    for _title, choices in catalog_groups():
        for c in choices:
            gib = float(c.label.rsplit("(", 1)[1].split(" GiB")[0])
            gpu = parse_assumed_gpu(c.spec)
            assert gpu.count == 1
            # the configuration named in the label, given the memory of the catalog's rule (what the backend
            # reports for it: an Arc A770's 15.1 GiB, an APU's carve-out and GTT, a Mac's Metal working set)
            card = load_catalog().find(c.label.rsplit(" (", 1)[0])
            assert card is not None and gib in card.memory_gib, c
            rule = card.assumed(gib)
            assert gpu.memory_bytes == rule.memory_bytes and gpu.shared_bytes == rule.shared_bytes, c
