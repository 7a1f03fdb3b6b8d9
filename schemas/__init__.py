"""Pydantic contracts between the layers: every workflow and activity takes one of these and
returns one. Limits are part of the contract, so bad input fails at the edge with a clear message."""
