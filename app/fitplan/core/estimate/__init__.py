"""Layer 5, one configuration turned into a per-device Estimate (estimator) and memory versus context (curve)."""
