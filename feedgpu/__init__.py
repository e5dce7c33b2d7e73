"""Feeding the GPU: the course's instruments (timing harness, sweeps, pipeline model, workloads)."""
