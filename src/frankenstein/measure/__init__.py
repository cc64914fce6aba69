"""Metric definitions from engine data (timings) and resources (GPU memory, power)."""
