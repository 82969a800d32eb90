"""Where models usually are, per OS. Everything is computed from an environment mapping and a home folder that the
caller passes, so tests never look at the real home folder.

* Hugging Face hub cache: `HF_HUB_CACHE`, `HUGGINGFACE_HUB_CACHE`, `HF_HOME`/hub, `XDG_CACHE_HOME`/huggingface/hub,
  ~/.cache/huggingface/hub (also on Windows and macOS).
* llama.cpp (build 11434): `-hf` downloads go to the hub cache above, except that `LLAMA_CACHE`, when set, replaces
  it (common/hf-cache.cpp). Older builds stored flat files in `fs_get_cache_directory()` (common/common.cpp):
  `LLAMA_CACHE`, else %LOCALAPPDATA%/llama.cpp (Windows), ~/Library/Caches/llama.cpp (macOS),
  `XDG_CACHE_HOME`/llama.cpp or ~/.cache/llama.cpp (elsewhere).
* LM Studio: ~/.lmstudio/models, ~/.cache/lm-studio/models, the home named by ~/.lmstudio-home-pointer, and the
  `downloadsFolder` of a settings.json in those homes.
* ollama: `OLLAMA_MODELS`, else ~/.ollama/models; on Linux also the system service's /usr/share/ollama/.ollama/models.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from fitplan.core.base.files import expand_home
from fitplan.core.base.numbers import loads_json
from fitplan.core.library.model import LibraryRoot, RootKind

LINUX_SERVICE_OLLAMA = Path("/usr/share/ollama/.ollama/models")


def _env_path(env: Mapping[str, str], name: str) -> Path | None:
    value = env.get(name, "").strip()
    return Path(expand_home(value)) if value else None


def hf_hub_cache(env: Mapping[str, str], home: Path) -> Path:
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        p = _env_path(env, name)
        if p is not None:
            return p
    hf_home = _env_path(env, "HF_HOME")
    if hf_home is not None:
        return hf_home / "hub"
    xdg = _env_path(env, "XDG_CACHE_HOME")
    if xdg is not None:
        return xdg / "huggingface" / "hub"
    return home / ".cache" / "huggingface" / "hub"


def llamacpp_legacy_cache(env: Mapping[str, str], home: Path, platform: str) -> Path | None:
    p = _env_path(env, "LLAMA_CACHE")
    if p is not None:
        return p
    if platform in ("win32", "cygwin"):
        local = _env_path(env, "LOCALAPPDATA")
        return local / "llama.cpp" if local is not None else None
    if platform == "darwin":
        return home / "Library" / "Caches" / "llama.cpp"
    xdg = _env_path(env, "XDG_CACHE_HOME")
    return (xdg if xdg is not None else home / ".cache") / "llama.cpp"


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def lmstudio_folders(home: Path) -> list[Path]:
    homes = [home / ".lmstudio", home / ".cache" / "lm-studio"]
    pointer = _read_text(home / ".lmstudio-home-pointer")
    if pointer:
        homes.insert(0, Path(expand_home(pointer)))
    out: list[Path] = []
    for h in homes:
        settings = _read_text(h / "settings.json")
        if settings:
            try:
                folder = loads_json(settings).get("downloadsFolder")
            except (ValueError, AttributeError):
                folder = None
            if isinstance(folder, str) and folder.strip():
                out.append(Path(expand_home(folder)))
        out.append(h / "models")
    return out


def default_roots(
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
    platform: str = sys.platform,
    system_ollama: Path | None = LINUX_SERVICE_OLLAMA,
) -> tuple[LibraryRoot, ...]:
    """Every default place, existing or not, without duplicates (the scanner ignores default places that are absent)."""
    environ = os.environ if env is None else env
    user_home = Path.home() if home is None else home
    candidates: list[LibraryRoot] = []
    llama_cache = _env_path(environ, "LLAMA_CACHE")
    if llama_cache is not None:
        candidates.append(LibraryRoot(str(llama_cache), RootKind.LLAMACPP))
    candidates.append(LibraryRoot(str(hf_hub_cache(environ, user_home)), RootKind.HUGGINGFACE))
    legacy = llamacpp_legacy_cache(environ, user_home, platform)
    if legacy is not None:
        candidates.append(LibraryRoot(str(legacy), RootKind.LLAMACPP))
    candidates.extend(LibraryRoot(str(p), RootKind.LMSTUDIO) for p in lmstudio_folders(user_home))
    ollama = _env_path(environ, "OLLAMA_MODELS")
    candidates.append(LibraryRoot(str(ollama or user_home / ".ollama" / "models"), RootKind.OLLAMA))
    if platform.startswith("linux") and system_ollama is not None and ollama is None:
        candidates.append(LibraryRoot(str(system_ollama), RootKind.OLLAMA))
    return dedupe_roots(candidates)


def dedupe_roots(roots: Sequence[LibraryRoot]) -> tuple[LibraryRoot, ...]:
    seen: set[str] = set()
    out: list[LibraryRoot] = []
    for r in roots:
        key = os.path.normcase(os.path.abspath(r.path))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return tuple(out)
