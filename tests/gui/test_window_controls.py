"""The devices llama-server uses (-dev), a draft model (-md), what the window remembers between sessions, a Hub
model reopened at start, and a settings folder that cannot be written."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from fitplan import cli
from fitplan.core.base.devices import GIB, Device, DeviceKind, Vendor, host_device
from fitplan.core.base.results import TERM_ORDER, TermKind
from fitplan.core.inputs.model_source import forget_loaded
from fitplan.core.inputs.user_settings import UserSettings, load_user_settings, save_user_settings
from fitplan.gui.backend import EXAMPLE_MODEL, Detection
from fitplan.gui.main_window import MainWindow
from support.hub import TEST_REPO

from .conftest import LLAMA, make_window

pytestmark = [pytest.mark.gui]
TIMEOUT = 20000
#: Two cards: llama.cpp calls them CUDA0 and CUDA1.
TWO_GPUS = Detection(
    (
        Device("RTX 4090", DeviceKind.GPU, 24 * GIB, 24 * GIB, Vendor.NVIDIA),
        Device("RTX 3060", DeviceKind.GPU, 12 * GIB, 12 * GIB, Vendor.NVIDIA),
    ),
    host_device(64 * GIB, 48 * GIB),
)
#: The same machine for the CLI.
ASSUME = ["--assume-gpu", "RTX 4090=24GiB", "--assume-gpu", "RTX 3060=12GiB"]


def settle(qtbot: Any, window: MainWindow) -> Any:
    p = window.planner
    qtbot.waitUntil(lambda: not p._debounce.isActive() and p.settled(), timeout=TIMEOUT)
    return p.outcome


@pytest.fixture
def two(qtbot: Any, private_config: Path) -> Iterator[MainWindow]:
    w = make_window(qtbot, TWO_GPUS, private_config)
    w.show()
    w.planner.start(str(LLAMA))
    settle(qtbot, w)
    yield w
    w.close()


def command_words(window: MainWindow) -> list[str]:
    return window.command.text.toPlainText().replace("\\\n", " ").split()


def value_after(words: list[str], flag: str) -> str | None:
    return words[words.index(flag) + 1] if flag in words else None


def cli_words(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    capsys.readouterr()
    assert cli.main(["command", str(LLAMA), *ASSUME, "--shell", "sh", *argv]) == 0
    return capsys.readouterr().out.split()


def pick(window: MainWindow, label_start: str) -> None:
    """Click the device menu's entry whose text starts with `label_start`."""
    actions = window.settings.device_actions()
    action = next(a for a in actions if a.text().startswith(label_start))
    action.trigger()


# -- -dev ----------------------------------------------------------------------------------------------------------
def test_the_device_menu_lists_the_planned_gpus_and_none(two: MainWindow) -> None:
    texts = [a.text() for a in two.settings.device_actions()]
    assert texts == [
        "All GPUs (no -dev)",
        "CUDA0: RTX 4090 (24 GiB)",
        "CUDA1: RTX 3060 (12 GiB)",
        "None: CPU only (-dev none)",
    ]
    assert two.settings.devices_button.text() == "all GPUs"
    assert "-dev" not in command_words(two)


def test_one_device_of_two(
    qtbot: Any, two: MainWindow, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pick(two, "CUDA0")  # untick the first card: only CUDA1 is used
    out = settle(qtbot, two)
    assert two.settings.devices() == ("CUDA1",) and two.settings.devices_button.text() == "CUDA1"
    assert out.estimate.settings.devices == ("CUDA1",)
    first, second = out.estimate.devices[0], out.estimate.devices[1]
    assert first.used_bytes == 0 and second.bytes_of(TermKind.WEIGHTS) > 0
    bars = [name.text() for name, _bar, _text in two.devices.rows if name.isVisible()]
    assert bars == ["RTX 3060", "Host"]  # the card llama-server does not use holds nothing
    assert out.curve is not None and int(out.curve.bytes[0].sum()) == 0  # the chart of CUDA0 is empty
    assert two.chart.device_box.currentIndex() == 1  # so the chart shows CUDA1
    words = command_words(two)
    assert value_after(words, "-dev") == "CUDA1" == value_after(cli_words(capsys, "-dev", "CUDA1"), "-dev")
    # the saved preset and script say it too, as `fitplan command --preset` does
    two.planner.configs.save_configuration(str(tmp_path / "plan.ini"))
    two.planner.configs.save_configuration(str(tmp_path / "plan.sh"))
    preset = [line for line in (tmp_path / "plan.ini").read_text().splitlines() if line.startswith("device")]
    capsys.readouterr()
    assert cli.main(["command", str(LLAMA), *ASSUME, "-dev", "CUDA1", "--preset"]) == 0
    cli_preset = [line for line in capsys.readouterr().out.splitlines() if line.startswith("device")]
    assert preset == cli_preset and len(preset) == 1
    assert value_after((tmp_path / "plan.sh").read_text().replace("\\\n", " ").split(), "-dev") == "CUDA1"


def test_no_device_plans_for_system_ram(
    qtbot: Any, two: MainWindow, capsys: pytest.CaptureFixture[str]
) -> None:
    pick(two, "None")
    out = settle(qtbot, two)
    assert two.settings.devices() == () and out.estimate.settings.devices == ()
    assert [d.used_bytes for d in out.estimate.devices[:2]] == [0, 0]
    assert out.estimate.devices[-1].bytes_of(TermKind.WEIGHTS) > 0
    words = command_words(two)
    assert value_after(words, "-dev") == "none" == value_after(cli_words(capsys, "-dev", "none"), "-dev")
    pick(two, "All")
    out = settle(qtbot, two)
    assert out.estimate.settings.devices is None and "-dev" not in command_words(two)
    assert two.chart.device_box.currentIndex() == 0  # back to the device shown before


def test_a_pasted_dev_sets_the_control(qtbot: Any, two: MainWindow) -> None:
    two.planner.configs.paste_command(f"llama-server -m {LLAMA} -dev CUDA1 -c 8192")
    out = settle(qtbot, two)
    assert two.settings.devices() == ("CUDA1",)
    checked = [a.text() for a in two.settings.device_actions() if a.isChecked()]
    assert checked == ["CUDA1: RTX 3060 (12 GiB)"]
    assert out.estimate.settings.devices == ("CUDA1",)
    assert value_after(command_words(two), "-dev") == "CUDA1"


def test_a_device_no_longer_planned_is_said_not_dropped(qtbot: Any, two: MainWindow) -> None:
    two.planner.configs.paste_command(f"llama-server -m {LLAMA} -dev CUDA1")
    settle(qtbot, two)
    two.hardware.list.item(1).setCheckState(Qt.CheckState.Unchecked)  # plan without the RTX 3060
    settle(qtbot, two)
    assert two.settings.devices() == ("CUDA1",)  # kept as the user set it
    assert two.banner.has("devices") and "CUDA1" in two.banner.text()
    assert "not planned" in two.settings.devices_button.text()


# -- -md -----------------------------------------------------------------------------------------------------------
def test_a_draft_model_from_the_library(
    qtbot: Any, two: MainWindow, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    s, backend = two.settings, two.planner.backend
    threads: list[str] = []
    real_load = backend.load

    def load(source: str) -> Any:
        threads.append(threading.current_thread().name)
        return real_load(source)

    monkeypatch.setattr(backend, "load", load)
    before = settle(qtbot, two)
    assert before.estimate.devices[0].bytes_of(TermKind.DRAFT) == 0
    index = s.draft.findData(str(LLAMA))
    assert index > 0, [
        s.draft.itemText(i) for i in range(s.draft.count())
    ]  # the library's models are offered
    s.draft.setCurrentIndex(index)
    assert s.draft_ngl.isVisible() and s.draft_cache_k.isVisible()
    out = settle(qtbot, two)
    assert threads and threading.main_thread().name not in threads  # read off the GUI thread
    draft_gpu = out.estimate.devices[0].bytes_of(TermKind.DRAFT)
    assert draft_gpu > 0 and out.estimate.settings.draft is not None
    assert out.curve is not None and int(out.curve.bytes[0, TERM_ORDER.index(TermKind.DRAFT)].max()) > 0
    words = command_words(two)
    assert value_after(words, "-md") == str(LLAMA)
    # The window's command, given to `fitplan estimate` for the same two cards: the same draft term.
    capsys.readouterr()
    rc = cli.main(["estimate", str(LLAMA), *words[3:], *ASSUME, "--json"])
    printed = capsys.readouterr()
    assert rc == 0, (words, printed.err)
    doc = json.loads(printed.out)
    assert doc["devices"][0]["terms"]["draft"] == draft_gpu
    # -ngld and the draft's cache types follow into the estimate and the command
    s.draft_ngl.setValue(10)
    s.draft_cache_k.setCurrentText("q8_0")
    out = settle(qtbot, two)
    words = command_words(two)
    assert value_after(words, "-ngld") == "10" and value_after(words, "-ctkd") == "q8_0"
    assert out.estimate.devices[0].bytes_of(TermKind.DRAFT) < draft_gpu
    # cleared: gone from the estimate and the command
    s.draft.setCurrentIndex(0)
    out = settle(qtbot, two)
    assert out.estimate.devices[0].bytes_of(TermKind.DRAFT) == 0 and "-md" not in command_words(two)
    assert not s.draft_ngl.isVisible()


def test_a_draft_model_by_file_and_by_paste(
    qtbot: Any, two: MainWindow, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    copy = tmp_path / "draft dir" / "tiny-draft.gguf"
    copy.parent.mkdir()
    copy.write_bytes(LLAMA.read_bytes())
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(copy), ""))
    two.settings.draft_browse.click()
    out = settle(qtbot, two)
    assert two.settings.draft_path() == str(copy) and two.settings.draft.currentText() == "tiny-draft.gguf"
    assert out.estimate.devices[0].bytes_of(TermKind.DRAFT) > 0
    two.planner.configs.paste_command(f"llama-server -m {LLAMA} -md {LLAMA} -ngld 5 -ctkd q8_0 -ctvd q4_0")
    settle(qtbot, two)
    s = two.settings
    assert (
        s.draft_path(),
        s.draft_ngl.value(),
        s.draft_cache_k.currentText(),
        s.draft_cache_v.currentText(),
    ) == (
        str(LLAMA),
        5,
        "q8_0",
        "q4_0",
    )
    two.planner.configs.paste_command(f"llama-server -m {LLAMA} -c 4096")  # no -md: the draft goes
    out = settle(qtbot, two)
    assert s.draft_path() == "" and out.estimate.settings.draft is None


def test_a_draft_that_cannot_be_read_is_said(qtbot: Any, two: MainWindow, tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf")
    two.settings.choose_draft(str(bad))
    out = settle(qtbot, two)
    assert two.banner.has("draft") and "broken.gguf" in two.banner.text()
    assert out.estimate.devices[0].bytes_of(TermKind.DRAFT) == 0
    assert two.settings.draft_path() == str(bad)  # what the user chose stays chosen
    two.settings.context_box.setValue(4096)
    assert settle(qtbot, two).estimate.settings.n_ctx == 4096  # the window keeps working


# -- persistence ---------------------------------------------------------------------------------------------------
def test_choices_are_back_in_the_next_session(qtbot: Any, private_config: Path) -> None:
    w = make_window(qtbot, TWO_GPUS, private_config)
    w.show()
    w.planner.start(str(LLAMA))
    settle(qtbot, w)
    w.settings.no_kv_offload.setChecked(True)
    w.hardware.host_ram.setValue(48)
    pick(w, "CUDA0")
    w.settings.choose_draft(str(LLAMA))
    settle(qtbot, w)
    w.close()

    again = make_window(qtbot, TWO_GPUS, private_config)
    again.show()
    again.planner.start()  # the last model: the one of the first session
    out = settle(qtbot, again)
    s = again.settings
    assert s.no_kv_offload.isChecked() and again.hardware.host_ram.value() == 48
    assert s.devices() == ("CUDA1",) and s.draft_path() == str(LLAMA)
    assert out.estimate.settings.no_kv_offload and out.estimate.settings.devices == ("CUDA1",)
    assert out.estimate.devices[-1].device.total_bytes == 48 * GIB
    assert out.estimate.devices[1].bytes_of(TermKind.DRAFT) > 0
    again.close()


# -- the last model from the Hub -----------------------------------------------------------------------------------
@pytest.fixture
def _fresh_loads() -> Iterator[None]:
    forget_loaded()
    yield
    forget_loaded()


def _restarted(qtbot: Any, saved: UserSettings, config: Path) -> MainWindow:
    """The window started on settings a previous session saved, once its start-up jobs are done."""
    save_user_settings(saved, config)
    w = make_window(qtbot, TWO_GPUS, config)
    assert isinstance(w, MainWindow)
    w.show()
    w.planner.start()
    settle(qtbot, w)
    return w


@pytest.mark.usefixtures("_fresh_loads")
def test_the_last_hub_model_reopens(qtbot: Any, private_config: Path, hub: Any) -> None:
    ref = f"hf.co/{TEST_REPO}:Q4_K_M"
    w = _restarted(qtbot, UserSettings(last_model=ref, recent_files=(ref,)), private_config)
    assert w.planner.model is not None and w.planner.model.source == ref
    assert f"-hf {TEST_REPO}:Q4_K_M" in w.command.text.toPlainText()
    w.close()


def test_a_hub_model_opened_before_is_listed_unread(qtbot: Any, private_config: Path, hub: Any) -> None:
    _, state = hub
    ref = f"hf.co/{TEST_REPO}:Q6_K"
    w = _restarted(qtbot, UserSettings(last_model=str(LLAMA), recent_files=(ref, str(LLAMA))), private_config)
    assert ref in w.models.model.paths() and state.cdn_bytes == 0  # listed again, nothing read until clicked
    w.close()


@pytest.mark.usefixtures("_fresh_loads")
def test_an_unreachable_hub_model_falls_back_to_the_example(
    qtbot: Any, private_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    ref = f"{TEST_REPO}:Q4_K_M"
    w = _restarted(qtbot, UserSettings(last_model=ref, recent_files=(ref,)), private_config)
    assert w.planner.model is not None and Path(w.planner.model.source).name == EXAMPLE_MODEL
    assert w.banner.has("reopen") and ref in w.banner.text()
    w.close()
    assert load_user_settings(private_config).settings.last_model == ref  # tried again next time


# -- a settings folder that cannot be written ----------------------------------------------------------------------
def test_a_failed_save_is_in_the_message_list(qtbot: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    config = blocker / "config"  # below a file: it cannot be created
    w = make_window(qtbot, TWO_GPUS, config)
    w.show()
    w.planner.start(str(LLAMA))
    settle(qtbot, w)
    w.settings.context_box.setValue(8192)
    qtbot.waitUntil(lambda: w.banner.has("settings-save"), timeout=TIMEOUT)  # saved a moment after a change
    assert str(blocker) in w.banner.text()
    w.settings.context_box.setValue(4096)
    assert settle(qtbot, w).estimate.settings.n_ctx == 4096  # the window keeps working
    w.close()


def test_a_hub_models_projector_follows_llama_server(
    qtbot: Any, private_config: Path, hub: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """For a Hub model the window counts the repository's projector, which -hf loads without any flag; choosing
    "not loaded" writes --no-mmproj. Both commands, estimated by `fitplan estimate`, give the window's projector
    bytes."""
    ref = f"hf.co/{TEST_REPO}:Q4_K_M"
    w = make_window(qtbot, TWO_GPUS, private_config)
    w.show()
    w.planner.start(ref)

    def window_and_cli() -> tuple[int, int, list[str]]:
        out = settle(qtbot, w)
        mine = sum(d.bytes_of(TermKind.MMPROJ) for d in out.estimate.devices)
        words = command_words(w)
        assert words[1:3] == ["-hf", f"{TEST_REPO}:Q4_K_M"], words
        capsys.readouterr()
        rc = cli.main(["estimate", ref, *words[3:], *ASSUME, "--json"])
        printed = capsys.readouterr()
        assert rc == 0, (words, printed.err)
        theirs = sum(int(d["terms"]["mmproj"]) for d in json.loads(printed.out)["devices"])
        return mine, theirs, words

    mine, theirs, words = window_and_cli()
    assert mine > 0 and mine == theirs and "--no-mmproj" not in words and "-mmu" not in words
    s = w.settings
    s.mmproj.setCurrentIndex(s.mmproj.findData("none"))
    mine, theirs, words = window_and_cli()
    assert mine == theirs == 0 and "--no-mmproj" in words
    w.close()


def test_identical_cards_are_told_apart(qtbot: Any, private_config: Path) -> None:
    """Two of the same card (the most common multi-GPU machine): the chart's device list and the device bars name
    each by its position."""
    card = Device("RTX 3090", DeviceKind.GPU, 24 * GIB, 24 * GIB, Vendor.NVIDIA)
    w = make_window(qtbot, Detection((card, card), host_device(64 * GIB, 48 * GIB)), private_config)
    w.show()
    w.planner.start(str(LLAMA))
    settle(qtbot, w)
    box = w.chart.device_box
    assert [box.itemText(i) for i in range(box.count())] == ["RTX 3090 (GPU0)", "RTX 3090 (GPU1)", "Host"]
    shown = [name.text() for name, _, _ in w.devices.rows if name.isVisible()]
    assert shown[:2] == ["RTX 3090 (GPU0)", "RTX 3090 (GPU1)"]
    w.close()
