"""Large language model engines behind one interface, and their offline provisioning."""
