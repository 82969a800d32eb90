"""fitplan: will this GGUF model fit on my machine, with what context, and how do I launch it?"""

__version__ = "0.1.0"

#: The llama.cpp build whose allocations the estimator reproduces.
LLAMA_CPP_COMMIT = "515e85511"
LLAMA_CPP_BUILD = 11434

__all__ = ["LLAMA_CPP_BUILD", "LLAMA_CPP_COMMIT", "__version__"]
