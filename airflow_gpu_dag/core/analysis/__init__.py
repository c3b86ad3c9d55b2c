"""Analyses of one graph, before anything runs: critical path and slack, weight rules, validation,
GPU request feasibility, lower bounds and learned duration estimates. Imports only ``core.model``."""
