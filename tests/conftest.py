"""Shared pytest configuration: the local-cluster fixtures live in the e2e harness."""

pytest_plugins = ["tailpilot_e2e.pytest_plugin", "tailpilot_e2e.background_bench"]
