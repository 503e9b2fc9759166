"""The local test cluster and the test/demo harness (import package `tailpilot_e2e`; not shipped)."""
