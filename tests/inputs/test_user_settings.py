"""The remembered window settings: round trip, atomic write, corrupt and future files set aside, bad fields reset
one by one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fitplan.core.base.launch_settings import FlashAttn, MmprojPlacement
from fitplan.core.inputs.user_settings import (
    ENV_CONFIG_DIR,
    MAX_RECENT,
    SCHEMA_VERSION,
    HypotheticalDevice,
    ModelChoices,
    UserSettings,
    choices_from_settings,
    config_dir,
    default_choices,
    load_user_settings,
    save_user_settings,
    settings_path,
    unheld_flags,
    with_unheld,
)


def _full_settings() -> UserSettings:
    return UserSettings(
        window_geometry="AdnQywADAAA=",
        window_state="AAAA/wAAAAD9",
        model_choices={
            "/models/a.gguf": ModelChoices(
                n_ctx=65536, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on"
            ),
            "https://example.org/b.gguf": ModelChoices(
                n_parallel=4, kv_unified=True, mmproj="cpu", n_cpu_moe=12
            ),
            "/models/ds.gguf": ModelChoices(
                engine="ik_llama.cpp",
                mla_mode=2,
                attn_max_batch_mib=512,
                fused_moe=False,
                run_time_repack=True,
                cache_type_k="q8_kv",
            ),
            "/models/bee.gguf": ModelChoices(
                engine="beellama",
                cache_type_k="kvarn4",
                cache_type_v="kvarn3",
                kv_tail_tokens=1024,
                kv_tail_type="bf16",
            ),
            "/models/ol.gguf": ModelChoices(engine="ollama", ollama_auto_ctx=True, gpu_overhead_mib=512),
            "/models/big.gguf": ModelChoices(
                no_kv_offload=True,
                draft_model="/models/small.gguf",
                draft_n_gpu_layers=12,
                draft_cache_type_k="q8_0",
                draft_cache_type_v="q4_0",
            ),
        },
        folders=("/models", "/more models"),
        hypothetical_devices=(
            HypotheticalDevice("RTX 4090", 24 << 30),
            HypotheticalDevice("MI300X", 192 << 30, "amd"),
            HypotheticalDevice("Radeon 8060S 128GB", 69 << 30, "amd", 68 << 30),
        ),
        planned_devices=("RTX 4090",),
        recent_files=("/models/a.gguf",),
        shell="powershell",
        llama_bin_dir="/opt/llama/bin",
        last_model="/models/a.gguf",
        host_ram_gib=48,
        launch_devices=("CUDA1",),
    )


def test_missing_file_gives_defaults(tmp_path: Path) -> None:
    result = load_user_settings(tmp_path)
    assert result.settings == UserSettings()
    assert result.message is None


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    original = _full_settings()
    path = save_user_settings(original, tmp_path)
    assert path == tmp_path / "settings.json"
    loaded = load_user_settings(tmp_path)
    assert loaded.message is None
    assert loaded.settings == original
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION


def test_write_is_atomic_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    save_user_settings(_full_settings(), tmp_path)
    save_user_settings(UserSettings(shell="cmd"), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]
    assert load_user_settings(tmp_path).settings.shell == "cmd"


def test_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_user_settings(UserSettings(shell="cmd"), tmp_path)

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("fitplan.core.inputs.user_settings.os.replace", boom)
    with pytest.raises(OSError, match="disk full"):
        save_user_settings(UserSettings(shell="powershell"), tmp_path)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]
    assert load_user_settings(tmp_path).settings.shell == "cmd"


@pytest.mark.parametrize("content", ["{not json", "[]", '"text"', "[" * 100_000 + "]" * 100_000])
def test_corrupt_file_is_set_aside_with_a_message(tmp_path: Path, content: str) -> None:
    settings_path(tmp_path).write_text(content)
    result = load_user_settings(tmp_path)
    assert result.settings == UserSettings()
    assert result.message is not None and "damaged" in result.message
    assert result.set_aside is not None and result.set_aside.read_text() == content
    assert result.set_aside.name.startswith("settings.json.corrupt-")
    assert not settings_path(tmp_path).exists()


@pytest.mark.parametrize(
    ("fields", "bad_key"),
    [
        ({"schema_version": "one"}, "schema_version"),
        ({"folders": "/models"}, "folders"),
        ({"model_choices": {"/m.gguf": {"cache_type_k": "q9_9"}}}, "cache_type_k"),
        ({"model_choices": {"/m.gguf": {"n_ctx": True}}}, "n_ctx"),
        ({"model_choices": {"/m.gguf": {"n_ctx": 1e30}}}, "n_ctx"),
        ({"model_choices": {"/m.gguf": {"n_ctx": 10**30}}}, "n_ctx"),
        ({"model_choices": {"/m.gguf": {"engine": "vllm"}}}, "engine"),
        ({"model_choices": {"/m.gguf": {"cache_type_k": "kvarn4"}}}, "cache_type_k"),
        ({"model_choices": {"/m.gguf": {"engine": "ik_llama.cpp", "mla_mode": 4}}}, "mla_mode"),
        ({"model_choices": {"/m.gguf": {"engine": "beellama", "kv_tail_type": "q4_0"}}}, "kv_tail_type"),
        ({"hypothetical_devices": [{"name": "x"}]}, "hypothetical_devices[0]"),
        ({"shell": "fish"}, "shell"),
    ],
)
def test_one_bad_field_takes_its_default_and_keeps_the_rest(
    tmp_path: Path, fields: dict[str, object], bad_key: str
) -> None:
    content = json.dumps({"schema_version": 1, "folders": ["/kept"], "last_model": "/kept/m.gguf", **fields})
    settings_path(tmp_path).write_text(content)
    result = load_user_settings(tmp_path)
    assert result.message is not None and bad_key in result.message
    assert result.settings.last_model == "/kept/m.gguf"
    if "folders" not in fields:
        assert result.settings.folders == ("/kept",)
    if "model_choices" in fields:  # the model keeps its entry; the bad choice is the default
        choices = result.settings.model_choices["/m.gguf"]
        assert getattr(choices, bad_key) == getattr(ModelChoices(), bad_key)
    copies = [p for p in tmp_path.iterdir() if p.name.startswith("settings.json.invalid-")]
    assert len(copies) == 1 and copies[0].read_text() == content  # the file as it was is kept
    assert settings_path(tmp_path).read_text() == content  # and not rewritten until the next save


def test_binary_garbage_is_set_aside(tmp_path: Path) -> None:
    settings_path(tmp_path).write_bytes(b"\xff\xfe\x00garbage\x80")
    result = load_user_settings(tmp_path)
    assert result.settings == UserSettings()
    assert result.message is not None
    assert not settings_path(tmp_path).exists()


def test_future_version_is_kept_aside_not_overwritten(tmp_path: Path) -> None:
    future = {"schema_version": SCHEMA_VERSION + 1, "shell": "cmd", "new_thing": [1, 2]}
    settings_path(tmp_path).write_text(json.dumps(future))
    result = load_user_settings(tmp_path)
    assert result.settings == UserSettings()
    assert result.message is not None and "newer fitplan" in result.message
    assert result.set_aside is not None
    assert json.loads(result.set_aside.read_text()) == future
    save_user_settings(result.settings, tmp_path)
    assert json.loads(result.set_aside.read_text()) == future


def test_two_corrupt_files_in_the_same_second_do_not_collide(tmp_path: Path) -> None:
    settings_path(tmp_path).write_text("{")
    first = load_user_settings(tmp_path).set_aside
    settings_path(tmp_path).write_text("}")
    second = load_user_settings(tmp_path).set_aside
    assert first is not None and second is not None and first != second
    assert first.read_text() == "{" and second.read_text() == "}"


def test_unknown_keys_are_ignored(tmp_path: Path) -> None:
    settings_path(tmp_path).write_text(json.dumps({"schema_version": 1, "shell": "cmd", "extra": 3}))
    result = load_user_settings(tmp_path)
    assert result.message is None
    assert result.settings.shell == "cmd"


def test_recent_files_are_unique_newest_first_and_capped() -> None:
    s = UserSettings()
    for i in range(MAX_RECENT + 3):
        s = s.with_recent(f"/m/{i}.gguf")
    s = s.with_recent("/m/5.gguf")
    assert s.recent_files[0] == "/m/5.gguf"
    assert len(s.recent_files) == MAX_RECENT
    assert len(set(s.recent_files)) == MAX_RECENT
    assert s.last_model == "/m/5.gguf"


def test_choices_per_model_and_launch_settings() -> None:
    s = UserSettings().with_choices("/m.gguf", ModelChoices(n_ctx=8192, flash_attn="off", mmproj="none"))
    assert s.choices_for("/other.gguf") == ModelChoices()
    launch = s.choices_for("/m.gguf").to_launch_settings(mmproj_path="/mmproj.gguf")
    assert launch.n_ctx == 8192
    assert launch.flash_attn is FlashAttn.OFF
    assert launch.mmproj is MmprojPlacement.NONE
    assert launch.mmproj_path is None  # "not loaded": no --mmproj at all
    on_gpu = ModelChoices(mmproj="gpu").to_launch_settings(mmproj_path="/mmproj.gguf")
    assert on_gpu.mmproj is MmprojPlacement.GPU and on_gpu.mmproj_path == "/mmproj.gguf"


def test_config_dir_honours_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CONFIG_DIR, str(tmp_path / "cfg"))
    assert config_dir() == tmp_path / "cfg"
    save_user_settings(UserSettings(shell="cmd"))
    assert (tmp_path / "cfg" / "settings.json").exists()
    assert load_user_settings().settings.shell == "cmd"


def test_engine_choices_become_the_engines_launch_settings() -> None:
    from fitplan.core.base.launch_settings import Engine

    ik = ModelChoices(
        engine="ik_llama.cpp", mla_mode=1, attn_max_batch_mib=256, fused_moe=False, run_time_repack=True
    ).to_launch_settings()
    assert (ik.engine, ik.mla_mode, ik.attn_max_batch_mib, ik.fused_moe, ik.run_time_repack) == (
        Engine.IK_LLAMA,
        1,
        256,
        False,
        True,
    )
    bee = ModelChoices(
        engine="beellama",
        cache_type_k="kvarn4",
        cache_type_v="kvarn4",
        kv_tail_tokens=1024,
        kv_tail_type="f32",
    ).to_launch_settings()
    assert (bee.engine, bee.cache_type_k, bee.kv_tail_tokens, bee.kv_tail_type) == (
        Engine.BEELLAMA,
        "kvarn4",
        1024,
        "f32",
    )
    ollama = ModelChoices(engine="ollama", n_ctx=8192, gpu_overhead_mib=512).to_launch_settings()
    assert (ollama.engine, ollama.n_ctx, ollama.gpu_overhead_bytes) == (Engine.OLLAMA, 8192, 512 << 20)
    # automatic num_ctx: n_ctx 0 lets the estimator resolve ollama's VRAM tier
    assert ModelChoices(engine="ollama", n_ctx=8192, ollama_auto_ctx=True).to_launch_settings().n_ctx == 0
    # the ollama-only fields do nothing for other engines
    assert (
        ModelChoices(gpu_overhead_mib=512, ollama_auto_ctx=True, n_ctx=8192).to_launch_settings().n_ctx
        == 8192
    )
    assert ModelChoices(gpu_overhead_mib=512).to_launch_settings().gpu_overhead_bytes == 0


def test_settings_written_before_engines_existed_load_as_mainline(tmp_path: Path) -> None:
    old = {"schema_version": 1, "model_choices": {"/m.gguf": {"n_ctx": 4096, "cache_type_k": "q8_0"}}}
    settings_path(tmp_path).write_text(json.dumps(old))
    result = load_user_settings(tmp_path)
    assert result.message is None
    c = result.settings.model_choices["/m.gguf"]
    assert (c.engine, c.n_ctx, c.cache_type_k) == ("llama.cpp", 4096, "q8_0")


def test_mainline_cache_types_are_the_engines_module_list() -> None:
    from fitplan.core.base.launch_settings import Engine
    from fitplan.core.engines import cache_types
    from fitplan.core.inputs.user_settings import engine_cache_types

    for engine in Engine:
        assert engine_cache_types(engine) == cache_types(engine)


def test_a_file_from_before_the_device_and_draft_choices_loads(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(
        json.dumps(
            {"schema_version": 1, "last_model": "/m.gguf", "model_choices": {"/m.gguf": {"n_ctx": 4096}}}
        )
    )
    loaded = load_user_settings(tmp_path)
    assert loaded.message is None
    s = loaded.settings
    assert s.host_ram_gib == 0 and s.launch_devices is None
    c = s.model_choices["/m.gguf"]
    assert c.n_ctx == 4096 and not c.no_kv_offload and c.draft_model == ""
    assert c.to_launch_settings().draft is None


def test_no_gpu_and_bad_device_and_draft_fields(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(
        json.dumps(
            {
                "launch_devices": [],
                "host_ram_gib": -5,
                "model_choices": {
                    "/m.gguf": {
                        "draft_model": "/d.gguf",
                        "draft_cache_type_k": "q9_9",
                        "draft_n_gpu_layers": 7,
                    }
                },
            }
        )
    )
    loaded = load_user_settings(tmp_path)
    s = loaded.settings
    assert s.launch_devices == ()  # -dev none
    assert s.host_ram_gib == 0  # out of range: its default
    c = s.model_choices["/m.gguf"]
    assert (c.draft_model, c.draft_cache_type_k, c.draft_n_gpu_layers) == ("/d.gguf", "f16", 7)
    assert (
        loaded.message is not None
        and "host_ram_gib" in loaded.message
        and "draft_cache_type_k" in loaded.message
    )
    draft = c.to_launch_settings().draft
    assert draft is not None and (draft.model_path, draft.n_gpu_layers) == ("/d.gguf", 7)


def test_choices_and_launch_settings_say_the_same() -> None:
    """Choices turned into settings and read back are the same choices; what no choice holds comes back through the
    unheld flags."""
    from fitplan.core.launch.flags import parse_flags

    c = ModelChoices(n_ctx=8192, cache_type_k="q8_0", n_parallel=3, kv_unified=True, n_gpu_layers=20,
                     n_cpu_moe=2, n_batch=1024, n_ubatch=256, no_kv_offload=True, draft_model="/m/d.gguf",
                     draft_n_gpu_layers=5, flash_attn="on", mmproj="cpu", margin_mib=512)  # fmt: skip
    assert choices_from_settings(c.to_launch_settings(), ModelChoices(margin_mib=512)) == c
    s = parse_flags(["-c", "4096", "--no-op-offload", "-nr", "--swa-full", "-ot", "blk\\.1\\.=CPU"]).settings
    words = unheld_flags(s)
    assert words == ("-ot", "blk\\.1\\.=CPU", "--swa-full", "--no-op-offload", "-nr")
    back = with_unheld(choices_from_settings(s, ModelChoices()).to_launch_settings(), words)
    assert (back.op_offload, back.repack, back.swa_full, back.tensor_overrides) == (
        False, False, True, s.tensor_overrides,
    )  # fmt: skip


def test_a_model_opens_at_the_default_context_or_its_training_length() -> None:
    assert default_choices(131072).n_ctx == 32768
    assert default_choices(4096).n_ctx == 4096
    assert default_choices(0).n_ctx == 256


def test_extra_flags_are_kept_per_model_and_read_back(tmp_path: Path) -> None:
    """A model's extra flags (kept from a pasted command) are saved with its choices, and read back as llama-server
    reads them: the planned ones, the kept ones; a flag a control holds is refused in one line; bad entries in the
    file are said and dropped."""
    from fitplan.core.base.errors import FlagError
    from fitplan.core.base.launch_settings import Engine
    from fitplan.core.inputs.user_settings import read_extra_flags

    words = ("--no-op-offload", "--alias", "my chat", "--jinja")
    s = UserSettings().with_choices("/m/a.gguf", ModelChoices(extra_args=words))
    save_user_settings(s, tmp_path)
    loaded = load_user_settings(tmp_path)
    assert loaded.message is None
    assert loaded.settings.choices_for("/m/a.gguf").extra_args == words
    assert loaded.settings.choices_for("/m/b.gguf").extra_args == ()
    extra = read_extra_flags(words, Engine.LLAMA_CPP)
    assert extra.planned == ("--no-op-offload",) and extra.kept == ("--alias", "my chat", "--jinja")
    assert extra.pins == frozenset({"no_op_offload"})
    with pytest.raises(FlagError, match=r"^-c, -ngl: set with the controls, not as extra flags$"):
        read_extra_flags(("-c", "4096", "-ngl", "3", "--jinja"), Engine.LLAMA_CPP)
    path = settings_path(tmp_path)
    doc = json.loads(path.read_text())
    doc["model_choices"]["/m/a.gguf"]["extra_args"] = ["--jinja", 7]
    path.write_text(json.dumps(doc))
    again = load_user_settings(tmp_path)
    assert again.settings.choices_for("/m/a.gguf").extra_args == ("--jinja",)
    assert again.message is not None and "extra_args" in again.message
