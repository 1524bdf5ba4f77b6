"""What the coordinator and the edge agents must agree on: topics, messages, payloads, settings."""
