"""contextfold server: memory context injection for agents, over gRPC."""
