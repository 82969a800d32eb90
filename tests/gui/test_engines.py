"""The engine selector: each engine's controls, cache types, estimate and command; the library's examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QWidget

from fitplan.core.base.launch_settings import Engine
from fitplan.core.base.results import TermKind
from fitplan.core.engines import cache_types
from fitplan.core.inputs.user_settings import load_user_settings
from fitplan.gui.main_window import MainWindow
from fitplan.gui.panels.models import PATH_ROLE

from .conftest import DEEPSEEK, GEMMA, LLAMA, ONE_GPU, QWEN_MOE, make_window, wait_settled

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_level_fail("WARNING")]
TIMEOUT = 15000
CTX = 32768


def choose_engine(qtbot: Any, window: MainWindow, engine: Engine) -> Any:
    combo = window.settings.engine
    combo.setCurrentIndex(combo.findData(engine.value))
    return wait_settled(qtbot, window)


def open_model(qtbot: Any, window: MainWindow, path: Path) -> Any:
    with qtbot.waitSignal(window.planner.model_loaded, timeout=TIMEOUT):
        window.planner.open(str(path))
    return wait_settled(qtbot, window)


def shown(window: MainWindow, widget: QWidget) -> bool:
    return widget.isVisibleTo(window)


def kv_bytes(outcome: Any) -> int:
    return sum(d.bytes_of(TermKind.KV) for d in outcome.estimate.devices)


def items(combo: Any) -> tuple[str, ...]:
    return tuple(combo.itemText(i) for i in range(combo.count()))


def test_each_engine_shows_its_own_controls_and_cache_types(qtbot: Any, window: MainWindow) -> None:
    s = window.settings
    ik_only = (s.mla, s.amb, s.fmoe, s.rtr)
    bee_only = (s.tail_tokens, s.tail_type)
    ollama_only = (s.ollama_auto, s.overhead)
    assert not any(shown(window, w) for w in (*ik_only, *bee_only, *ollama_only))
    assert items(s.cache_k) == cache_types(Engine.LLAMA_CPP)

    choose_engine(qtbot, window, Engine.IK_LLAMA)
    assert all(shown(window, w) for w in ik_only)
    assert not any(shown(window, w) for w in (*bee_only, *ollama_only))
    assert items(s.cache_k) == cache_types(Engine.IK_LLAMA)
    assert "q8_kv" in items(s.cache_k)
    assert not s.mla.isEnabled()  # Llama 3.1 has no latent attention: ik runs it as -mla 0

    choose_engine(qtbot, window, Engine.BEELLAMA)
    assert all(shown(window, w) for w in bee_only)
    assert not any(shown(window, w) for w in (*ik_only, *ollama_only))
    assert items(s.cache_v) == cache_types(Engine.BEELLAMA)
    for t in ("kvarn2", "kvarn3", "kvarn4", "kvarn5", "kvarn6", "kvarn8", "q2_0", "q3_1", "q6_1"):
        assert t in items(s.cache_k)

    choose_engine(qtbot, window, Engine.OLLAMA)
    assert all(shown(window, w) for w in ollama_only)
    # one OLLAMA_KV_CACHE_TYPE for K and V, no unified cache switch, no --n-cpu-moe, no micro-batch
    assert not any(shown(window, w) for w in (*ik_only, *bee_only, s.cache_v, s.unified, s.cpu_moe))
    assert s.kv_label.text() == "KV cache type:"
    assert "OLLAMA_NUM_PARALLEL" in s.slots.toolTip()

    choose_engine(qtbot, window, Engine.LLAMA_CPP)
    assert shown(window, s.cache_v) and shown(window, s.unified) and shown(window, s.cpu_moe)
    assert not any(shown(window, w) for w in (*ik_only, *bee_only, *ollama_only))


def test_every_engine_control_says_what_it_does_to_memory(window: MainWindow) -> None:
    s = window.settings
    for w in (s.engine, s.amb, s.fmoe, s.rtr, s.tail_tokens, s.tail_type, s.ollama_auto, s.overhead, s.mla):
        assert len(w.toolTip()) > 40, w


def test_deepseek_with_ik_mla_3_caches_the_latent_rows(qtbot: Any, window: MainWindow) -> None:
    open_model(qtbot, window, DEEPSEEK)
    out = choose_engine(qtbot, window, Engine.IK_LLAMA)
    assert window.settings.mla.isEnabled()
    assert out.estimate.settings.engine is Engine.IK_LLAMA
    # -mla 3: one latent row of (kv_lora_rank 512 + rope 64) f16 values per token and layer:
    # 576 * 2 B * 27 layers * 32768 tokens = 1,019,215,872 B.
    assert kv_bytes(out) == 576 * 2 * 27 * CTX
    command = window.command.text.toPlainText()
    assert "-mla 3" in command and "-fmoe" in command
    assert "--fit" not in command  # ik_llama.cpp has no --fit
    # -mla 0 caches every head's K (192) and V (128): 16 heads * 320 * 2 B * 27 * 32768 = 9,059,696,640 B.
    window.settings.mla.setCurrentIndex(window.settings.mla.findData(0))
    out = wait_settled(qtbot, window)
    assert kv_bytes(out) == 16 * 320 * 2 * 27 * CTX
    assert "-mla 0" in window.command.text.toPlainText()
    window.settings.amb.setValue(512)
    wait_settled(qtbot, window)
    assert "-amb 512" in window.command.text.toPlainText()


def test_beellama_kvarn4_records_stage_and_tail(qtbot: Any, window: MainWindow) -> None:
    choose_engine(qtbot, window, Engine.BEELLAMA)
    window.settings.cache_k.setCurrentText("kvarn4")
    window.settings.cache_v.setCurrentText("kvarn4")
    out = wait_settled(qtbot, window)
    # Llama 3.1 8B: 32 layers, 8 KV heads of 128. Records: (16 * 4 bits + 6) B per 128-element slice, 8 slices
    # per cell and side -> 560 B * 2 sides * 32 layers * 32768 = 1,174,405,120 B. Stage: 128 * 128 * 2 B per slice
    # and group, 3 groups (2 per sequence + the sink) -> 98,304 B * 8 * 2 * 32 = 50,331,648 B. Tail: the intrinsic
    # 128 tokens + 1 rollback row of f16, 1024 wide -> 129 * 1024 * 2 B * 2 * 32 = 16,908,288 B.
    assert kv_bytes(out) == 1_174_405_120 + 50_331_648 + 16_908_288
    command = window.command.text.toPlainText()
    assert "-ctk kvarn4" in command and "-ctv kvarn4" in command
    # A longer exact tail: 1024 tokens + 1 rollback row -> 1025 * 1024 * 2 B * 2 * 32 = 134,348,800 B.
    window.settings.tail_tokens.setValue(1024)
    out = wait_settled(qtbot, window)
    assert kv_bytes(out) == 1_174_405_120 + 50_331_648 + 134_348_800
    assert "--kv-tail-tokens 1024" in window.command.text.toPlainText()
    # Back on mainline, kvarn4 does not exist: the cache falls back to f16.
    choose_engine(qtbot, window, Engine.LLAMA_CPP)
    assert window.settings.cache_k.currentText() == "f16"


def test_ollama_shows_its_environment_and_modelfile(qtbot: Any, window: MainWindow) -> None:
    out = choose_engine(qtbot, window, Engine.OLLAMA)
    text = window.command.text.toPlainText()
    assert "llama-server" not in text
    assert f"PARAMETER num_ctx {CTX}" in text and "ollama create" in text
    assert window.settings.batch.value() == 512  # ollama's num_batch, passed as -b and -ub
    assert out.estimate.settings.n_batch == out.estimate.settings.n_ubatch == 512
    window.settings.slots.setValue(2)
    window.settings.cache_k.setCurrentText("q8_0")
    window.settings.overhead.setValue(512)
    out = wait_settled(qtbot, window)
    text = window.command.text.toPlainText()
    assert "export OLLAMA_NUM_PARALLEL=2" in text
    assert "export OLLAMA_KV_CACHE_TYPE=q8_0" in text
    assert f"export OLLAMA_GPU_OVERHEAD={512 << 20}" in text
    assert f"PARAMETER num_ctx {CTX // 2}" in text  # num_ctx is per parallel request
    assert out.estimate.settings.cache_type_v == "q8_0"  # one type for K and V
    window.command.set_shell("powershell")
    assert "$env:OLLAMA_NUM_PARALLEL = '2'" in window.command.text.toPlainText()


def test_ollama_automatic_context_follows_the_vram_tier(qtbot: Any, window: MainWindow) -> None:
    choose_engine(qtbot, window, Engine.OLLAMA)
    window.settings.context_box.setValue(8192)
    wait_settled(qtbot, window)
    window.settings.ollama_auto.setChecked(True)
    out = wait_settled(qtbot, window)
    assert not window.settings.context_box.isEnabled()
    # ONE_GPU has 24 GiB in total: from 23 GiB ollama picks num_ctx 32768 (below the 128K training length).
    assert out.estimate.settings.n_ctx == 32768
    assert window.settings.context_box.value() == 32768
    assert any("VRAM tier" in n for n in out.notes)
    text = window.command.text.toPlainText()
    assert "num_ctx" not in text and "OLLAMA_CONTEXT_LENGTH" not in text


def test_engine_is_remembered_per_model(qtbot: Any, private_config: Path) -> None:
    w = make_window(qtbot, ONE_GPU, private_config)
    w.show()
    w.planner.start(str(DEEPSEEK))
    wait_settled(qtbot, w)
    choose_engine(qtbot, w, Engine.IK_LLAMA)
    w.settings.mla.setCurrentIndex(w.settings.mla.findData(2))
    wait_settled(qtbot, w)
    open_model(qtbot, w, LLAMA)
    assert w.settings.current_engine() is Engine.LLAMA_CPP
    open_model(qtbot, w, DEEPSEEK)
    assert w.settings.current_engine() is Engine.IK_LLAMA
    assert w.settings.mla.currentData() == 2
    w.close()
    saved = load_user_settings(private_config).settings.model_choices[str(DEEPSEEK)]
    assert (saved.engine, saved.mla_mode) == (Engine.IK_LLAMA.value, 2)


def test_verify_is_offered_for_mainline_only(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    (tmp_path / "llama-server").write_text("")
    (tmp_path / "llama-server").chmod(0o755)
    window.planner.commands.set_llama_bin_dir(str(tmp_path))
    assert window.command.verify_button.isVisibleTo(window)
    choose_engine(qtbot, window, Engine.IK_LLAMA)
    assert not window.command.verify_button.isVisibleTo(window)


def test_first_launch_lists_the_bundled_examples(qtbot: Any, window: MainWindow) -> None:
    qtbot.waitUntil(lambda: window.planner.jobs.running == 0, timeout=TIMEOUT)
    model = window.models.model
    rows = {
        Path(model.index(r, 0).data(PATH_ROLE)).name: model.index(r, 0).data()
        for r in range(model.rowCount())
    }
    assert rows == {
        LLAMA.name: "Llama 3.1 8B Instruct (example)",
        QWEN_MOE.name: "Qwen3 30B A3B (example)",
        GEMMA.name: "Gemma 3 12b It + vision (example)",
        DEEPSEEK.name: "DeepSeek V2 Lite Chat (example)",
    }
    # Header-only files show the size their header declares, not the 18-40 KB on disk.
    sizes = [model.index(r, 3).data() for r in range(model.rowCount())]
    assert all(float(s.split()[0]) >= 4.0 for s in sizes)
    # The scan's fit badges: every example is estimated once the hardware is known.
    qtbot.waitUntil(lambda: all(model.index(r, 5).data() for r in range(model.rowCount())), timeout=TIMEOUT)
