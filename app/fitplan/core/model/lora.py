"""LoRA adapters (`--lora`, `--lora-scaled`): what llama.cpp loads of an adapter file (src/llama-adapter.cpp,
llama_adapter_lora_init_impl).

An adapter file says general.type = adapter and adapter.type = lora; its tensors come in pairs
`<base tensor>.lora_a` / `<base tensor>.lora_b`, each pair adapting one weight of the base model. llama.cpp
allocates both in the buffer type of that weight (so on its layer's device), except that a weight in an extra
buffer type (CPU_REPACK) gets its pair in the plain CPU buffer; one buffer per buffer type, every tensor padded to
the buffer's alignment; the memory is allocated, not mapped from the file. Recorded in
tests/fixtures/llamacpp/terms/ (grid j): the compute buffer reserved again once the adapters are applied came out
the same size.
"""

from __future__ import annotations

from dataclasses import dataclass

from fitplan.core.base.errors import FitplanError
from fitplan.core.gguf.header import GGUFHeader

__all__ = ["LoraAdapter", "LoraError", "LoraPair", "lora_from_header"]


class LoraError(FitplanError):
    """An adapter file llama.cpp would refuse."""


@dataclass(frozen=True, slots=True)
class LoraPair:
    base: str  # the adapted weight ("blk.0.attn_q.weight")
    a_bytes: int  # ggml_nbytes of lora_a
    b_bytes: int  # ggml_nbytes of lora_b
    a_shape: tuple[int, ...] = ()  # ggml order (ne0 first)
    b_shape: tuple[int, ...] = ()

    def fits(self, base_shape: tuple[int, ...]) -> bool:
        """The shape check of llama_adapter_lora_init_impl: A is [n_in, r], B is [r, n_out] for a weight
        [n_in, n_out] (the token embeddings: A and B swapped)."""
        a = (*self.a_shape, 1, 1)
        b = (*self.b_shape, 1, 1)
        m = (*base_shape, 1, 1)
        if self.base == "token_embd.weight":
            return m[0] == b[1] and m[1] == a[1]
        return m[0] == a[0] and m[1] == b[1] and a[1] == b[0]


@dataclass(frozen=True, slots=True)
class LoraAdapter:
    path: str
    pairs: tuple[LoraPair, ...]

    @property
    def n_bytes(self) -> int:
        return sum(p.a_bytes + p.b_bytes for p in self.pairs)


def lora_from_header(header: GGUFHeader, path: str) -> LoraAdapter:
    """The adapter in `header`, checked as llama.cpp checks it (one-line errors)."""
    name = path.rsplit("/", 1)[-1]
    if header.get_str("general.type") != "adapter":
        raise LoraError(f"--lora {name}: not a LoRA adapter (general.type is not 'adapter')")
    if header.get_str("adapter.type") != "lora":
        raise LoraError(f"--lora {name}: adapter.type is not 'lora'")
    a: dict[str, tuple[int, tuple[int, ...]]] = {}
    b: dict[str, tuple[int, tuple[int, ...]]] = {}
    for t in header.tensors:
        if t.name.endswith(".lora_a"):
            a[t.name[: -len(".lora_a")]] = (t.n_bytes, t.shape)
        elif t.name.endswith(".lora_b"):
            b[t.name[: -len(".lora_b")]] = (t.n_bytes, t.shape)
    if set(a) != set(b):
        odd = sorted(set(a) ^ set(b))[0]
        raise LoraError(f"--lora {name}: {odd} has a lora_a or a lora_b tensor, not both")
    if not a:
        raise LoraError(f"--lora {name}: no lora_a / lora_b tensors")
    return LoraAdapter(path, tuple(LoraPair(k, a[k][0], b[k][0], a[k][1], b[k][1]) for k in a))
