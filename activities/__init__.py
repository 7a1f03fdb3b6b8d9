"""Activities: all I/O of the flows. One small class per external system, built with its client.

Every activity takes one Pydantic model from `schemas/` and returns one. Permanent failures raise
`ApplicationError(type=..., non_retryable=True)`; everything else is retried per the policy table in
`ragkit/policies.py`.
"""
