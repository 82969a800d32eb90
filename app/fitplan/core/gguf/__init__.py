"""Layer 1, the file: ggml types and row sizes, the GGUF header, the local and remote readers, the header cache."""
