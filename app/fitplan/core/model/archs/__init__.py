"""The architecture registry: what llama.cpp does differently per architecture, one record each (`traits_of`)."""

from fitplan.core.gguf.header import MMPROJ_ARCHITECTURE
from fitplan.core.model.archs.registry import (
    ARCHITECTURES,
    KNOWN_ARCHITECTURES,
    NAME_TABLES,
    traits_of,
)
from fitplan.core.model.archs.rules import (
    DSV4_CSA_RATIO,
    DSV4_HCA_RATIO,
    RS_SEQ_SPEC_TYPES,
    ArchRecurrent,
    ArchSwa,
    HybridAttnFilter,
    MemoryLayout,
    RecurrentRule,
    SwaRule,
    SwaType,
    glm_dsa_default_indexer_full,
    swa_pattern,
)
from fitplan.core.model.archs.traits import (
    ArchTraits,
    ForkTraits,
    GraphTraits,
    HParamTraits,
    IndexerRule,
    KpoolGraph,
    KpoolSource,
    KvSharing,
    MemoryTraits,
)

__all__ = [
    "ARCHITECTURES",
    "DSV4_CSA_RATIO",
    "DSV4_HCA_RATIO",
    "KNOWN_ARCHITECTURES",
    "MMPROJ_ARCHITECTURE",
    "NAME_TABLES",
    "RS_SEQ_SPEC_TYPES",
    "ArchRecurrent",
    "ArchSwa",
    "ArchTraits",
    "ForkTraits",
    "GraphTraits",
    "HParamTraits",
    "HybridAttnFilter",
    "IndexerRule",
    "KpoolGraph",
    "KpoolSource",
    "KvSharing",
    "MemoryLayout",
    "MemoryTraits",
    "RecurrentRule",
    "SwaRule",
    "SwaType",
    "glm_dsa_default_indexer_full",
    "swa_pattern",
    "traits_of",
]
