"""Learned SSD/HDD placement of intermediate files: log schema, features, model, policy, simulator."""
