"""The control period and the fast checks: decisions executed on replicas and live batching."""
