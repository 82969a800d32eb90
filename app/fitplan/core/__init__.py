"""Qt-free core of fitplan: GGUF reading, model profile, estimator, planner, command builder, scanning, hardware."""
