"""Default model places per OS, computed from an injected environment and home folder only."""

from __future__ import annotations

import json
from pathlib import Path

from fitplan.core.library import LibraryRoot, RootKind, default_roots, hf_hub_cache, llamacpp_legacy_cache


def roots(env: dict[str, str], home: Path, platform: str = "linux") -> list[tuple[str, RootKind]]:
    return [(r.path, r.kind) for r in default_roots(env, home, platform, system_ollama=None)]


def test_linux_defaults(tmp_path: Path) -> None:
    h = tmp_path
    assert roots({}, h) == [
        (str(h / ".cache/huggingface/hub"), RootKind.HUGGINGFACE),
        (str(h / ".cache/llama.cpp"), RootKind.LLAMACPP),
        (str(h / ".lmstudio/models"), RootKind.LMSTUDIO),
        (str(h / ".cache/lm-studio/models"), RootKind.LMSTUDIO),
        (str(h / ".ollama/models"), RootKind.OLLAMA),
    ]


def test_hub_cache_environment_precedence(tmp_path: Path) -> None:
    h = tmp_path
    assert hf_hub_cache({"HF_HUB_CACHE": "/a", "HF_HOME": "/b", "XDG_CACHE_HOME": "/c"}, h) == Path("/a")
    assert hf_hub_cache({"HUGGINGFACE_HUB_CACHE": "/old", "HF_HOME": "/b"}, h) == Path("/old")
    assert hf_hub_cache({"HF_HOME": "/b", "XDG_CACHE_HOME": "/c"}, h) == Path("/b/hub")
    assert hf_hub_cache({"XDG_CACHE_HOME": "/c"}, h) == Path("/c/huggingface/hub")


def test_llama_cache_and_per_os_legacy_folders(tmp_path: Path) -> None:
    h = tmp_path
    assert llamacpp_legacy_cache({"LLAMA_CACHE": "/lc"}, h, "linux") == Path("/lc")
    assert llamacpp_legacy_cache({"XDG_CACHE_HOME": "/x"}, h, "linux") == Path("/x/llama.cpp")
    assert llamacpp_legacy_cache({}, h, "darwin") == h / "Library/Caches/llama.cpp"
    assert llamacpp_legacy_cache({"LOCALAPPDATA": "C:/Users/u/AppData/Local"}, h, "win32") == Path(
        "C:/Users/u/AppData/Local/llama.cpp"
    )
    assert llamacpp_legacy_cache({}, h, "win32") is None
    # LLAMA_CACHE replaces the hub cache for -hf downloads of this build: scanned first, listed once
    got = roots({"LLAMA_CACHE": "/lc"}, h)
    assert got[0] == ("/lc", RootKind.LLAMACPP) and [p for p, _ in got].count("/lc") == 1


def test_lmstudio_settings_and_home_pointer(tmp_path: Path) -> None:
    h = tmp_path
    (h / ".lmstudio").mkdir()
    (h / ".lmstudio" / "settings.json").write_text(json.dumps({"downloadsFolder": "/data/lms"}))
    (h / ".lmstudio-home-pointer").write_text(str(h / "elsewhere") + "\n")
    lms = [p for p, k in roots({}, h) if k is RootKind.LMSTUDIO]
    assert lms == [
        str(h / "elsewhere/models"),
        "/data/lms",
        str(h / ".lmstudio/models"),
        str(h / ".cache/lm-studio/models"),
    ]


def test_ollama_models_variable_and_linux_service_store(tmp_path: Path) -> None:
    h = tmp_path
    assert ("/srv/ollama", RootKind.OLLAMA) in roots({"OLLAMA_MODELS": "/srv/ollama"}, h)
    service = [r for r in default_roots({}, h, "linux", system_ollama=Path("/svc")) if r.path == "/svc"]
    assert service == [LibraryRoot("/svc", RootKind.OLLAMA)]
    assert not [r for r in default_roots({}, h, "darwin", system_ollama=Path("/svc")) if r.path == "/svc"]
