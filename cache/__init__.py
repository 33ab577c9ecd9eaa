"""LMDB store of fully augmented samples keyed by (sample, variant)."""
