"""Layer 3, mainline llama.cpp's allocations for one profile and settings: context caches, weights per device, compute buffers, runtime reserve."""
