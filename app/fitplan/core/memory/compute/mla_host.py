"""The first GPU's attention over copies of a host KV cache with MLA (`MlaHostCache`): the absorbed query's graph,
the cache view's copies, the mask, then the FFNs that run above the mask left there."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from fitplan.core.memory.compute.allocator import Affine, BestFit, ReplayOp
from fitplan.core.memory.compute.terms import Cells, loop_over


@dataclass(frozen=True, slots=True)
class MlaHostCache:
    """`HostCacheAttention`'s MLA form: the GPU's first layer over a cache in host memory (`-nkvo`, or a host
    layer whose multiplications the first GPU takes), where the cache holds the compressed KV (kv_lora_rank + rope
    dims per cell) and the absorbed attention reads K as the cache's view and V as a view of its first kv_lora_rank
    dims (src/models/deepseek2.cpp at 515e85511: `build_attn(..., Qcur, Kcur, Vcur, ...)` with Vcur the latent;
    src/llama-graph.cpp `build_attn_mha`: `v = ggml_view_4d(k, ...)` for MLA). The scheduler copies both views and
    the mask in at the attention's split (ggml-backend.cpp `ggml_backend_sched_split_graph`, in the order the op
    reads them), each view as its whole extent (`ggml_nbytes`: V's ends one row's rope part short of K's). Replayed
    with the allocator's best fit (`BestFit`) over the blocks live at the layer's start (`layout`, bottom up; the
    attention norm's block "norm" is freed after the compressed KV's product): the query's ops (`query`,
    `attention.absorbed_mla_ops` to Kcur's store), the copies (on a later GPU first the layer input, `residual`,
    a split input of the attention's split as the stores into the cache before it ran on the host), the
    attention's ops (`attend`), then with only the
    blocks and the mask live each of the GPU's FFNs (`ffns`): a host layer's copied matrices and outputs
    (`ffn.offloaded_ffn_ops`), else its live set as one block. The allocator's list on the CUDA-shaped stand-in,
    DeepSeek-V2-Lite with llama-server's reserve at `-ngl 0` and 32768 cells: q and q_nope_absorbed above the
    blocks, Qcur above them (56 MiB), K's 36 MiB copy, V's, the 32 MiB mask at 128 MiB; layer 1's 187 MiB copy of
    its down experts above the mask (347.0 MiB, where the gate's and up's 99 MiB copies fit under it); DeepSeek-V3
    over two GPUs with `-nkvo` at 32768 cells, on the second: the layer input, K, V and the mask in the space
    q_nope_absorbed and q_pe left under Qcur, the 128 MiB attention output above Qcur (481.0 MiB). The bytes
    above the plan's layer inputs (`base`)."""

    layout: tuple[tuple[str, int], ...]
    query: tuple[ReplayOp, ...]
    k: Affine  # the cache view's copy
    v: Affine  # V's view's copy
    mask: Affine  # the mask's copy
    attend: tuple[ReplayOp, ...]  # the flash attention's output and what follows it to the output projection
    ffns: tuple[tuple[ReplayOp, ...], ...]
    base: Affine
    residual: int = 0  # the layer input a later GPU copies in at the split, before K (0: live in `layout`)
    label: str = "host-cache K/V, mask copies (MLA)"

    def at(self, nb: int, ns: int) -> int:
        return _mla_host_at(self, nb, ns)

    def replay(self, nb: int, ns: int) -> int:
        """The highest end of the replays, above `base` (`at` without its cache)."""
        below = sum(size for _, size in self.layout)
        top = max((self._ffn_peak(ops, nb, ns) for ops in self.ffns), default=self._attention(nb, ns).peak)
        return max(0, below + top - self.base.at(nb, ns))

    def _attention(self, nb: int, ns: int) -> BestFit:
        sim = BestFit.from_layout(self.layout)
        sim.run(self.query)
        copies = [("res", self.residual), ("k", max(0, self.k.at(nb, ns))), ("v", max(0, self.v.at(nb, ns)))]
        copies.append(("m", self.mask.at(nb, ns)))
        sim.run([*copies, *self.attend])
        # everything of the attention freed; the blocks and the mask stay
        sim.run([(name, 0) for name in list(sim.live) if name not in {"m", "res", *dict(self.layout)}])
        return sim

    def _ffn_peak(self, ops: tuple[ReplayOp, ...], nb: int, ns: int) -> int:
        sim = self._attention(nb, ns)
        return sim.run(ops)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return loop_over(self, nb, ns)


@lru_cache(maxsize=4096)
def _mla_host_at(term: MlaHostCache, nb: int, ns: int) -> int:
    """`MlaHostCache.replay`, kept for the last contexts asked (a curve asks for the same ones as a slider moves)."""
    return term.replay(nb, ns)
