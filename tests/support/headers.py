"""GGUF headers made by hand, in memory, for the profile builder's and the context rules' tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gguf.constants import GGMLQuantizationType as T
from gguf.constants import GGUFValueType

from fitplan.core.gguf.ggml_types import nbytes
from fitplan.core.gguf.header import GGUFArray, GGUFHeader, GGUFTensorInfo, MetadataValue


def arr(values: Iterable[int | bool], element_type: int = GGUFValueType.INT32) -> GGUFArray:
    vals = tuple(values)
    return GGUFArray(element_type=element_type, length=len(vals), values=vals)


def make_header(
    arch: str,
    meta: Mapping[str, MetadataValue],
    tensors: Iterable[tuple[str, int, tuple[int, ...]]] = (),
    general: Mapping[str, MetadataValue] | None = None,
    source: str = "model.gguf",
    data_offset: int = 4096,
) -> GGUFHeader:
    md: dict[str, MetadataValue] = {"general.architecture": arch, **(general or {})}
    md.update({f"{arch}.{k}": v for k, v in meta.items()})
    infos = []
    offset = 0
    for name, ggml_type, shape in tensors:
        n = nbytes(ggml_type, shape)
        infos.append(GGUFTensorInfo(name=name, ggml_type=ggml_type, shape=shape, offset=offset, n_bytes=n))
        offset += (n + 31) // 32 * 32
    return GGUFHeader(
        source=source,
        version=3,
        byte_order="<",
        metadata=md,
        tensors=tuple(infos),
        alignment=32,
        data_offset=data_offset,
        file_size=data_offset + offset,
        header_bytes_read=data_offset,
    )


def dense(n_layer: int, n_head: int = 8, n_head_kv: int = 2, head: int = 64, **extra: MetadataValue) -> dict:
    return {
        "block_count": n_layer,
        "context_length": 8192,
        "embedding_length": n_head * head,
        "feed_forward_length": 1024,
        "attention.head_count": n_head,
        "attention.head_count_kv": n_head_kv,
        **extra,
    }


def llama_tensors(n_layer: int, n_embd: int = 512, n_vocab: int = 1000, output: bool = True) -> list:
    ts: list[tuple[str, int, tuple[int, ...]]] = [("token_embd.weight", T.Q4_K, (n_embd, n_vocab))]
    for il in range(n_layer):
        ts += [
            (f"blk.{il}.attn_norm.weight", T.F32, (n_embd,)),
            (f"blk.{il}.attn_q.weight", T.Q4_K, (n_embd, n_embd)),
            (f"blk.{il}.attn_k.weight", T.Q4_K, (n_embd, 128)),
            (f"blk.{il}.attn_v.weight", T.Q6_K, (n_embd, 128)),
            (f"blk.{il}.attn_output.weight", T.Q4_K, (n_embd, n_embd)),
            (f"blk.{il}.ffn_gate.weight", T.Q4_K, (n_embd, 1024)),
            (f"blk.{il}.ffn_up.weight", T.Q4_K, (n_embd, 1024)),
            (f"blk.{il}.ffn_down.weight", T.Q6_K, (1024, n_embd)),
        ]
    ts.append(("output_norm.weight", T.F32, (n_embd,)))
    if output:
        ts.append(("output.weight", T.Q6_K, (n_embd, n_vocab)))
    return ts


def ssm_meta(n_layer: int, **extra: MetadataValue) -> dict:
    return {
        **dense(n_layer),
        "ssm.conv_kernel": 4,
        "ssm.inner_size": 4096,
        "ssm.state_size": 128,
        "ssm.group_count": 16,
        "ssm.time_step_rank": 32,
        **extra,
    }
