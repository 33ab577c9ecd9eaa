"""Learned SSD/HDD placement of intermediate files: log schema, features, model, policy,
simulator, and the bound on what any placement could save (:mod:`placement.bound`)."""
