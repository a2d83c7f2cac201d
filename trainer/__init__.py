"""zephyr.trainer: a torch MoE language model and its training loop (imports with torch, numpy, fsspec only)."""
