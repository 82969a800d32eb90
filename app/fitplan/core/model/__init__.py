"""Layer 2, what llama.cpp's loader makes of a header: the architecture registry and the resolved ModelProfile."""
