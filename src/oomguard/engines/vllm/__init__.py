"""vLLM: flags, version behaviours, startup accounting and KV cache arithmetic."""
