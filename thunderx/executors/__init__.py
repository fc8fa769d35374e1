"""Executors: generated torch code (any device) and nvFuser fusion regions (CUDA)."""
