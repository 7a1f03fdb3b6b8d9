"""ragkit: the base library of durable-rag.

The building blocks every layer above uses, importing none of them (import-linter checks it):
settings, the activity policy table, the Postgres record (db, store), parsing and chunking,
embedding, the vector index adapters, LLM engines, retrieval math, prompts, streaming, metrics and
ids. Flows (workflows/), I/O per external system (activities/), worker processes (workers/) and
entry points (durable_rag/, cli/, gateway/) sit above it; only the contracts (schemas/) sit below.
"""
