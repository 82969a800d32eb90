"""Layer 0, shared by every stage: errors, units, devices and machines, launch settings, and the result types."""
