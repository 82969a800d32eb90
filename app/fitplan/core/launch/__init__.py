"""Layer 7, llama-server's command line both ways: flags, commands for each shell, INI presets, RPC servers."""
