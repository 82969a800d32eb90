"""The CUDA kit's `standin` grid and its comparison: a real card runs the recorded one-card stand-in cases with the
same flags (tools/groundtruth/cuda/record_cuda.py --grid standin), and compare_standin.py puts the two side by side."""

from __future__ import annotations

import copy
import json
from typing import Any

from support.models import REPO
from support.tools import load_tool

kit = load_tool("tools/groundtruth/cuda/record_cuda.py")
compare = load_tool("tools/groundtruth/cuda/compare_standin.py")
STANDIN = REPO / "tests" / "fixtures" / "llamacpp" / "standin"


def _recorded(model: str) -> dict[str, Any]:
    return json.loads((STANDIN / f"{model}.json").read_text())


def test_the_standin_grid_replays_the_one_card_cases_with_their_flags() -> None:
    info = kit.model_info("qwen3-30b-a3b")
    settings = {cid: args for cid, args, _ in kit.standin_settings(info)}
    doc = _recorded("qwen3-30b-a3b")
    specs = {
        c["id"]: c["command"][c["command"].index("--standin") + 1] for c in doc["cases"] if "error" not in c
    }
    one_card = {cid for cid, spec in specs.items() if spec.startswith("cuda:") and "," not in spec}
    assert set(settings) == one_card
    # two stand-in devices, or an AMD one, are not the kit's one NVIDIA card
    assert "2dev-c8192-faon" not in settings and "rocm-gfx1100-c8192-faon" not in settings
    args = settings["c8192-faon-cmoe-ub2048"]
    assert args == [
        "-t",
        "1",
        "-ngl",
        "999",
        "-np",
        "1",
        "-c",
        "8192",
        "-fa",
        "on",
        "-cmoe",
        "-b",
        "2048",
        "-ub",
        "2048",
    ]


def _as_kit(model: str) -> dict[str, Any]:
    doc = _recorded(model)
    return {
        "cases": [
            {"kind": "dryrun", "model": model, "id": c["id"], "results": c["results"]}
            for c in doc["cases"]
            if "results" in c
        ]
    }


def test_a_card_that_matches_the_stand_in_is_flagged_nowhere() -> None:
    kit_doc = _as_kit("llama-3.1-8b")
    lines, compared, over = compare.compare(kit_doc, 0.01)
    assert compared == len(kit_doc["cases"]) == len(lines)
    assert over == 0 and not any(ln.startswith("!!") for ln in lines)


def test_a_compute_buffer_two_percent_apart_is_flagged() -> None:
    kit_doc = copy.deepcopy(_as_kit("llama-3.1-8b"))
    case = next(c for c in kit_doc["cases"] if c["id"] == "c4096-faon")
    gpu = next(b for b in case["results"]["buffers"] if not b["is_host"])
    gpu["compute"] = int(gpu["compute"] * 1.02)
    lines, _, over = compare.compare(kit_doc, 0.01)
    assert over == 1
    assert next(ln for ln in lines if ln.startswith("!!")).startswith("!! llama-3.1-8b/c4096-faon:")
