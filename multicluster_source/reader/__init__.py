"""The reader role of the multi-cluster source (implementation; nothing public here)."""
