"""Real serving engines plugged into the prefix_cache target (SGLang's RadixCache)."""
