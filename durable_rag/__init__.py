"""durable-rag: retrieval-augmented generation whose every flow is a Temporal workflow."""

__version__ = "0.1.0"
