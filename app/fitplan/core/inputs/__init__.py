"""Layer 8, what the user gives turned into core inputs: one model loader, one machine builder, saved user settings."""
