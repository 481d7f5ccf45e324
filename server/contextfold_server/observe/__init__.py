"""What an operator sees: Prometheus metrics, OpenTelemetry traces, and one JSON log line per call."""
