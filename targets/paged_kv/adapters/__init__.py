"""Real serving engines (vLLM) plugged into the paged_kv target: managers and kernels."""
