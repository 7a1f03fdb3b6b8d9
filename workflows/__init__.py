"""Workflows: deterministic orchestration, one flow per module. All I/O happens in activities."""
