"""Worker processes. Each polls one task queue and hosts the activities of one kind of resource."""
