"""Pure builders of the Kubernetes objects an InferenceService owns (no I/O, clock or environment).

One module per child: `build_job` (engine build Job), `triton_configmap`
(config.pbtxt), `deployment` (Triton), `service`, `pdb`, `service_monitor`,
`prometheus_rule`; shared pieces in `meta` (labels, owner references, hashes),
`placement` (GPU pinning, exclusive anti-affinity, `ServingTarget`) and
`security` (restricted PodSecurity contexts). Inputs are typed values
(`InferenceService`, `BuildRequest`, `BuildResult`, `BatchingConfig`,
`ManifestSettings`), passed by keyword; outputs are plain dicts ready for the
Kubernetes API. `triton_model_config` renders Triton's model configuration for
the ConfigMap, the autoscaler's live reload and the engine build alike.
"""
