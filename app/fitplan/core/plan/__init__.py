"""Layer 6, the decision: the context search, the placement solver and the one verdict every surface shows."""
