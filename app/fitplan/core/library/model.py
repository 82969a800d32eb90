"""What a library scan yields: models (split sets as one, projectors attached) and files it skipped, with why."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class RootKind(StrEnum):
    HUGGINGFACE = "huggingface"  # a Hugging Face hub cache (models--org--repo/snapshots/REV/...)
    LLAMACPP = "llama.cpp"  # llama.cpp's own download cache (older builds' flat folder)
    LMSTUDIO = "lmstudio"
    OLLAMA = "ollama"  # an ollama store: manifests/ + blobs/
    FOLDER = "folder"  # a folder the user added
    EXAMPLES = "examples"  # the header-only example models bundled with fitplan


@dataclass(frozen=True, slots=True)
class LibraryRoot:
    path: str
    kind: RootKind = RootKind.FOLDER


@dataclass(frozen=True, slots=True)
class FileSummary:
    """What a scan keeps of one GGUF file's header (cached on disk, so a rescan reads no header)."""

    architecture: str
    name: str  # general.name
    file_type: str  # "Q4_K_M"...
    n_params: int  # elements of all tensors in this file
    n_ctx_train: int
    n_layer: int  # block_count
    split_no: int  # split.no (0-based), 0 when not split
    split_count: int  # split.count, 1 when not split
    expected_size: int  # bytes the header declares (data offset + tensor data)
    is_mmproj: bool
    header_bytes: int  # bytes read to parse the header
    header_only: bool = False  # HEADER_ONLY_KEY is set: complete without its tensor data

    def to_dict(self) -> dict[str, object]:
        return {
            "architecture": self.architecture,
            "name": self.name,
            "file_type": self.file_type,
            "n_params": self.n_params,
            "n_ctx_train": self.n_ctx_train,
            "n_layer": self.n_layer,
            "split_no": self.split_no,
            "split_count": self.split_count,
            "expected_size": self.expected_size,
            "is_mmproj": self.is_mmproj,
            "header_bytes": self.header_bytes,
            "header_only": self.header_only,
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> FileSummary:
        def i(key: str) -> int:
            v = d[key]
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(key)
            return v

        def s(key: str) -> str:
            v = d[key]
            if not isinstance(v, str):
                raise ValueError(key)
            return v

        return cls(
            architecture=s("architecture"),
            name=s("name"),
            file_type=s("file_type"),
            n_params=i("n_params"),
            n_ctx_train=i("n_ctx_train"),
            n_layer=i("n_layer"),
            split_no=i("split_no"),
            split_count=i("split_count"),
            expected_size=i("expected_size"),
            is_mmproj=d["is_mmproj"] is True,
            header_bytes=i("header_bytes"),
            header_only=d.get("header_only") is True,
        )


@dataclass(frozen=True, slots=True)
class LibraryModel:
    path: str  # the first shard, as found (a hub snapshot link, not the blob it points to)
    shard_paths: tuple[str, ...]
    display_name: str  # "org/repo: file.gguf", "llama3.2:latest", or the path under its root
    root_kind: RootKind
    architecture: str
    name: str
    file_type: str
    file_size: int  # bytes on disk, all shards
    n_params: int
    n_ctx_train: int
    n_layer: int
    mmproj_path: str | None = None
    aliases: tuple[str, ...] = ()  # other names of the same file (ollama tags sharing a blob)
    expected_size: int = 0  # bytes the headers declare, all shards (a header-only file is smaller on disk)
    header_only: bool = False  # a header-only file (HEADER_ONLY_KEY): its size is the declared one


@dataclass(frozen=True, slots=True)
class SkippedFile:
    path: str
    reason: str  # "partial download", "incomplete download: ...", "unreadable folder: ...", "not a GGUF file: ..."


@dataclass(frozen=True, slots=True)
class ScanProgress:
    files_seen: int
    models_found: int
    skipped: int
    headers_read: int  # header reads this scan (0 on a rescan of an unchanged library)
    header_bytes_read: int
    current: str  # the folder or file being looked at


@dataclass(frozen=True, slots=True)
class ScanResult:
    models: tuple[LibraryModel, ...]
    skipped: tuple[SkippedFile, ...]
    headers_read: int
    header_bytes_read: int
    cancelled: bool = False
