"""The HTTP gateway: FastAPI over the Temporal client, for callers that do not speak Temporal."""
