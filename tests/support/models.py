"""The recorded fixtures and the profiles built from their headers (each header read once per test run)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from fitplan.core.gguf.reader import read_header
from fitplan.core.model.builder import build_profile
from fitplan.core.model.profile import ModelProfile

#: The tests folder and the repository it sits in.
TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
LLAMACPP = FIXTURES / "llamacpp"
MODELS = LLAMACPP / "models"
#: Published-size models as header-only files (the tensors' data is not stored).
SPARSE = MODELS / "sparse"
#: llama.cpp's test-llama-archs smoke models, one per architecture.
ARCHS = MODELS / "archs"
IK_LLAMA = FIXTURES / "ik_llama"


@functools.cache
def profile_at(path: Path) -> ModelProfile:
    """The profile of the (header-only) GGUF at `path`."""
    return build_profile(read_header(path, allow_incomplete=True))


def sparse(name: str) -> ModelProfile:
    """A published-size model, e.g. `sparse("llama-3.1-8b")`."""
    return profile_at(SPARSE / f"{name}.header.gguf")


def smoke(name: str) -> ModelProfile:
    """A test-llama-archs smoke model, e.g. `smoke("mamba2-dense")`."""
    return profile_at(ARCHS / f"{name}.header.gguf")


def load_json(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), path
    return data
