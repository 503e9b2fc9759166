"""Alertmanager's webhook and what its firing alerts tell each service's loop."""
