"""Cluster-facing code: the kopf operator, the reconciler, and the Prometheus/Triton/Alertmanager adapters."""
