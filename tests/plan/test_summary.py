"""The verdict in words (`fitplan.core.plan.summary`): the sentence both front ends show, and the device to show
first when a plan does not fit."""

from __future__ import annotations

import dataclasses

from fitplan.core.base.devices import GIB, MIB, Machine, assumed_gpu, host_device
from fitplan.core.base.launch_settings import Engine
from fitplan.core.base.units import fmt_ctx
from fitplan.core.gguf.reader import open_model
from fitplan.core.model.builder import build_profile
from fitplan.core.plan.planner import MarginPolicy, Pins, Plan, plan
from fitplan.core.plan.summary import slots_words, verdict_words
from fitplan.core.plan.usage import DeviceUse, shortfalls
from fitplan.core.plan.verdict import FitLevel, Verdict
from support.models import TESTS

SPARSE = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"


def _llama_plan() -> tuple[Machine, Plan]:
    prof = build_profile(
        open_model(str(SPARSE / "llama-3.1-8b.header.gguf"), find_mmproj=False, allow_incomplete=True)
    )
    m = Machine((assumed_gpu("A", 8),), host_device(16 * GIB))
    return m, plan(prof, m, Pins(n_ctx=8192))


def test_the_device_shown_first_is_the_one_short_by_the_most_after_its_margin() -> None:
    """The GPU is 100 MiB over its free memory with a 256 MiB margin (356 MiB short); the host is 100 MiB under
    its free memory with its 1 GiB margin (924 MiB short). "Used minus free" would pick the GPU; the verdict's
    shortfalls say the host is short by more."""
    m, p = _llama_plan()
    gpu, host = m.gpus[0], m.host
    margin = MarginPolicy(gpu_margin_bytes=256 * MIB)
    usage = (
        DeviceUse(gpu, "GPU0 (A)", gpu.free_bytes + 100 * MIB, gpu.free_bytes - 256 * MIB, gpu_index=0),
        DeviceUse(host, "host RAM", host.free_bytes - 100 * MIB, host.free_bytes - GIB),
    )
    v = Verdict(FitLevel.NO_FIT, False, False, margin, usage, shortfalls(usage), None, 1, False)
    words = verdict_words(dataclasses.replace(p, shortfalls=()), v, 8192, True)
    assert words.level is FitLevel.NO_FIT and words.most_short == 1
    assert words.text.startswith("Does not fit at 8K context: host RAM short by 924 MiB")
    assert words.text.endswith("Planned for 1 slot (llama-server's default: 4 slots sharing one KV cache).")


def test_slots_say_when_they_are_llama_server_default() -> None:
    base = Verdict(FitLevel.FITS, True, True, MarginPolicy(), (), (), None, 4, True)
    assert slots_words(base) == "4 slots sharing one KV cache (llama-server's -np auto)"
    assert slots_words(dataclasses.replace(base, n_seq=2)) == "2 slots sharing one KV cache"
    assert slots_words(dataclasses.replace(base, kv_unified=False)) == "4 slots, one KV cache each"


def test_with_ollama_the_verdict_quotes_ollamas_default_slots_not_llama_servers() -> None:
    """ollama runs one slot unless OLLAMA_NUM_PARALLEL says otherwise: its verdict names no llama-server default."""
    _m, p = _llama_plan()
    ollama = dataclasses.replace(p, settings=dataclasses.replace(p.settings, engine=Engine.OLLAMA))
    one = Verdict(FitLevel.FITS, True, True, MarginPolicy(), (), (), None, 1, False)
    words = verdict_words(ollama, one, 8192, True).text
    assert "llama-server" not in words
    assert words.endswith("Planned for 1 slot.")
    two = verdict_words(ollama, dataclasses.replace(one, n_seq=2), 8192, True).text
    assert two.endswith("Planned for 2 slots, one KV cache each (ollama's default: 1 slot).")
    # the same verdict for llama-server still names its -np auto
    assert verdict_words(p, one, 8192, True).text.endswith(
        "Planned for 1 slot (llama-server's default: 4 slots sharing one KV cache)."
    )


def test_context_sizes_of_a_million_tokens_and_more_read_in_m() -> None:
    """Llama 4 Scout's training length (10,485,760 tokens) reads 10M, not 10240K."""
    prof = build_profile(
        open_model(
            str(SPARSE / "llama-4-scout-17b-16e.header.gguf"), find_mmproj=False, allow_incomplete=True
        )
    )
    assert prof.n_ctx_train == 10 * 1024 * 1024
    assert fmt_ctx(prof.n_ctx_train) == "10M"
    assert [fmt_ctx(n) for n in (1000, 4096, 32768, 1 << 20, 1536 << 10, 3 << 20)] == [
        "1,000", "4K", "32K", "1M", "1536K", "3M",
    ]  # fmt: skip


def test_a_gpu_that_holds_nothing_is_not_the_one_with_the_least_to_spare() -> None:
    """Two cards, every layer on the first (-ts 1,0): the second holds nothing, so the verdict's spare memory is the
    first card's, not the empty card's whole free memory (it named the 12 GiB card with 11 GiB to spare)."""
    from fitplan.core.base.launch_settings import LaunchSettings
    from fitplan.core.estimate.estimator import estimate
    from fitplan.core.plan.verdict import judge

    prof = build_profile(
        open_model(str(SPARSE / "llama-3.1-8b.header.gguf"), find_mmproj=False, allow_incomplete=True)
    )
    m = Machine((assumed_gpu("Big", 24), assumed_gpu("Small", 12)), host_device(64 * GIB))
    est = estimate(prof, LaunchSettings(n_ctx=8192, tensor_split=(1.0, 0.0)), m)
    assert est.devices[0].used_bytes > 0 and est.devices[1].used_bytes == 0
    v = judge(est, m, MarginPolicy())
    assert v.tightest is not None and v.tightest.gpu_index == 0
