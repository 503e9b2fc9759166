"""The kubectl tools (`tailpilot status`, `tailpilot report`): programs a person runs against a cluster.

Apart from the operator: they read an InferenceService through the person's kubeconfig (and
Prometheus, for the report) and never act on the cluster, and the operator never imports them (the
report's plotting loads matplotlib).
"""
