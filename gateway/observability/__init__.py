"""What an operator sees of a running gateway: structured logs, Prometheus metrics, trace ids and optional
OpenTelemetry spans."""
