"""Remote context providers: their registrations in Postgres, and the fan-out that calls them over gRPC."""
