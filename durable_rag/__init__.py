"""durable-rag, the application: what starts and drives flows.

The typed client backend services use (`durable_rag.client.RagClient`), the embedded stack
launcher (`durable_rag.stack`), the index maintenance schedules and the hot model swap. The
operator's CLI (cli/) and the HTTP gateway (gateway/) are built on it; the base library (ragkit/)
and the flows (workflows/) know nothing of it.
"""

__version__ = "0.1.0"
