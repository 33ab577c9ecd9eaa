"""DALI preprocessing recipes (train/eval), device choice and recipe fingerprints."""
