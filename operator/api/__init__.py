"""Typed values: the InferenceService API (v1alpha1) and the operator/builder/policy contracts."""
