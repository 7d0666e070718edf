"""Mirrors TorchAir's package path (collops CPU shim)."""
