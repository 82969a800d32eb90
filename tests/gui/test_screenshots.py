"""Screenshots of the main states on a real X server (Xvfb), checked for blank or clipped windows.

The PNGs land in tests/_artifacts/screenshots/ (git-ignored) for people to look at.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.screenshot, pytest.mark.gui]

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "_artifacts" / "screenshots"
SCRIPT = Path(__file__).with_name("screenshot_states.py")
#: A picture of one flat colour has a grey-level standard deviation of 0; a window with text, a chart and
#: controls measures 30-45 on the 0-255 scale. Anything under 10 is a blank or nearly blank window.
MIN_GREY_STD = 10.0
STATES = (
    "main",
    "moe-partial-offload",
    "does-not-fit",
    "vision-two-gpus",
    "mla-minimum-size",
    "error-banner",
    "deepseek-llamacpp",
    "deepseek-ik-mla3",
    "beellama-kvarn4",
    "ollama",
    "devices-and-draft",
    "messages-no-gpu-1024",
    "two-3060-qwen-1280",
    "two-3060-qwen-1024",
    "long-paste-1280",
    "long-paste-1024",
    "more-gpus-1024",
    "held-by-others-1280",
    "held-by-others-1024",
    "many-rows-1280",
    "many-rows-1024",
    "main-1024",
    "main-1280",
    "main-1920",
)
#: With no message above the verdict the whole column fits: verdict, chart and command, nothing scrolled away
#: (four "what would change it" rows of up to three lines take the command's place: it scrolls into view).
NO_MESSAGE_STATES = tuple(
    s for s in STATES if not s.startswith(("error", "messages", "long-paste", "many-rows"))
)


@pytest.fixture(scope="module")
def display() -> Iterator[str]:
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        pytest.skip("Xvfb is not installed (tools/dev.py test installs it on Debian-like systems)")
    for number in range(90, 140):
        if not Path(f"/tmp/.X11-unix/X{number}").exists() and not Path(f"/tmp/.X{number}-lock").exists():
            break
    else:
        pytest.skip("no free X display number")
    proc = subprocess.Popen(
        [xvfb, f":{number}", "-screen", "0", "1920x1200x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/tmp/.X11-unix/X{number}").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"Xvfb :{number} did not start")
            time.sleep(0.05)
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(10)


def _run(display: str, home: Path, *extra: str) -> None:
    env = dict(
        os.environ,
        DISPLAY=display,
        QT_QPA_PLATFORM="xcb",
        HOME=str(home),
        FITPLAN_CONFIG_DIR=str(home / "cfg"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        FITPLAN_CACHE_DIR=str(home / "fitplan-cache"),
    )
    env.pop("WAYLAND_DISPLAY", None)
    for name in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "LLAMA_CACHE", "OLLAMA_MODELS"):
        env.pop(name, None)  # nothing points the window at this machine's model folders
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(OUT), *extra], env=env, capture_output=True, text=True, timeout=180
    )
    if "could not connect to display" in done.stderr or ("xcb" in done.stderr and done.returncode != 0):
        pytest.skip(f"Qt's xcb platform cannot start here: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throw-away home for the window process: nothing it writes reaches the real one."""
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def report(display: str, home: Path) -> dict[str, dict[str, object]]:
    OUT.mkdir(parents=True, exist_ok=True)
    _run(display, home)
    data: dict[str, dict[str, object]] = json.loads((OUT / "report.json").read_text())
    return data


@pytest.mark.parametrize("state", STATES)
def test_state_is_drawn_and_nothing_is_clipped(report: dict[str, dict[str, object]], state: str) -> None:
    shot = report[state]
    assert (OUT / str(shot["file"])).stat().st_size > 10_000
    assert float(shot["grey_std"]) > MIN_GREY_STD  # type: ignore[arg-type]
    assert shot["clipped"] == []
    # the settings column never runs past the window's side; the command is on screen unless messages push it down
    scrolled_away = [w for w in shot["not_in_view"] if w.startswith(("command", "copy button"))]  # type: ignore[union-attr]
    assert shot["not_in_view"] == ([] if state in NO_MESSAGE_STATES else scrolled_away)
    assert int(shot["list_name_width"]) >= 130  # type: ignore[call-overload]  # model names readable at 1024 px


def test_messages_stay_readable_and_the_quants_dialog_fits_a_small_screen(
    report: dict[str, dict[str, object]],
) -> None:
    both = str(report["messages-no-gpu-1024"]["banner"])
    assert (
        "not a GGUF file" in both and "No GPU detected" in both
    )  # two messages, both on screen (not clipped)
    paste = str(report["long-paste-1024"]["banner"])
    assert "--alias" in paste and "-ot" in paste
    quants = report["quants-1024"]
    assert int(quants["minimum_width"]) <= 1024 - 32 and int(quants["size"][0]) <= 1024 - 32  # type: ignore[index, call-overload]
    assert quants["rows"] == 4 and quants["clipped"] == []
    assert float(quants["grey_std"]) > MIN_GREY_STD  # type: ignore[arg-type]


def test_the_wheel_scrolls_the_settings_of_a_real_window(report: dict[str, dict[str, object]]) -> None:
    assert report["wheel-1024"] == {"values_kept": True, "scrolled_by": report["wheel-1024"]["scrolled_by"]}
    assert int(report["wheel-1024"]["scrolled_by"]) > 0  # type: ignore[call-overload]


def test_states_say_what_they_show(report: dict[str, dict[str, object]]) -> None:
    assert str(report["main"]["verdict"]).startswith("Fits:")
    assert str(report["moe-partial-offload"]["verdict"]).startswith("Fits only with")
    assert str(report["does-not-fit"]["verdict"]).startswith("Does not fit")
    assert "not a GGUF file" in str(report["error-banner"]["banner"])
    assert report["mla-minimum-size"]["size"] == [1024, 640]
    assert "-mla 3" in str(report["deepseek-ik-mla3"]["command"])
    assert "-mla" not in str(report["deepseek-llamacpp"]["command"])
    assert "-ctk kvarn4" in str(report["beellama-kvarn4"]["command"])
    ollama = str(report["ollama"]["command"])
    assert "export OLLAMA_NUM_PARALLEL=2" in ollama and "PARAMETER num_ctx" in ollama
    for size in ("1024", "1280"):  # the rows of several lines, whole (the clipped check) and applicable
        rows = report[f"many-rows-{size}"]["alternatives"]
        assert any(r.startswith("-nkvo: ") for r in rows), rows  # type: ignore[union-attr]
        assert any(r.startswith("without the draft model") and r.endswith("(apply)") for r in rows), rows  # type: ignore[union-attr]
    both = str(report["devices-and-draft"]["command"])
    assert "-dev CUDA1" in both and "-md " in both and "-ngld 20" in both


def test_dark_theme(display: str, home: Path) -> None:
    _run(display, home, "--dark")
    shots = json.loads((OUT / "report-dark.json").read_text())
    assert len(shots) == 6
    for shot in shots.values():
        assert float(shot["grey_std"]) > MIN_GREY_STD
        assert shot["clipped"] == []
    from PySide6.QtGui import QImage

    image = QImage(str(OUT / "main-dark.png"))
    # The window background of a dark theme is dark: sample the status bar's left end.
    assert image.pixelColor(4, image.height() - 4).lightness() < 128
