"""Reads and writes of the record that the application and the activities share: API keys,
feedback, uploads, the model alias, conversation history and the cost reports. Activities write
the rows of a flow; what the CLI, the client and the gateway read or change directly lives here."""
