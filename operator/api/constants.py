"""Names shared by the API, the manifest builders, the controller and the chart.

Label and annotation keys are built from the API group (as crate-operator's
`constants.py` does), next to the standard `app.kubernetes.io/*` labels, so a
rename of the group changes every key in one place. Condition types and
reasons are CamelCase constants (as Kueue's are); the controller never writes
a free-form reason.
"""

from __future__ import annotations

from typing import Final

# --- The API -----------------------------------------------------------------

GROUP: Final = "tailpilot.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "InferenceService"
LIST_KIND: Final = "InferenceServiceList"
PLURAL: Final = "inferenceservices"
SINGULAR: Final = "inferenceservice"
#: KServe owns `isvc` (and `inferenceservice` under serving.kserve.io); ours must not clash.
SHORT_NAMES: Final = ("tpisvc", "tpi")
CATEGORIES: Final = ("tailpilot", "all")
CRD_NAME: Final = f"{PLURAL}.{GROUP}"
#: Finalizer-free by design: children are garbage-collected through owner references.

# --- Labels and annotations ----------------------------------------------------

LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_VERSION: Final = "app.kubernetes.io/version"

PART_OF: Final = "tailpilot"
MANAGED_BY: Final = "tailpilot-operator"
#: app.kubernetes.io/name of the serving pods (the application is Triton).
APP_NAME_TRITON: Final = "triton"
APP_NAME_BUILDER: Final = "tailpilot-builder"

COMPONENT_SERVER: Final = "inference-server"
COMPONENT_BUILD: Final = "engine-build"
#: The profile Job: the engine measured in the service's own Triton, on a node of its hardware.
COMPONENT_PROFILE: Final = "engine-profile"
COMPONENT_MODEL_CONFIG: Final = "model-config"
COMPONENT_MONITORING: Final = "monitoring"
#: The headless Service the ServiceMonitor scrapes when pods may leave the main Service.
COMPONENT_METRICS: Final = "metrics"

#: The admin-key Secret's suffix (`tailpilot.manifests.triton_access`).
ADMIN_KEY_SECRET_SUFFIX: Final = "-triton-admin"
#: What the operator appends to a service's name to name a child (`<name><suffix>`). An
#: InferenceService whose own name ends with one is refused at creation: service `a-metrics` would
#: otherwise want the Service `a-metrics` that service `a` owns, and so on for every child of
#: either. The Jobs need no entry: their suffixes (`-build-` and 10 hex, `-profile-` and 8 hex) are of
#: fixed length and differ, so a Job's name determines its service. `tests/manifests/test_child_names.py`
#: checks every child the manifests build against this list.
#: The NetworkPolicy over a service's build and profile Job pods (`<name>-engine-jobs`).
ENGINE_JOBS_POLICY_SUFFIX: Final = "-engine-jobs"
#: The headless Service over a service's pods that the activator forwards to (`<name>-pods`), and
#: the EndpointSlice that routes the service's own Service to the activator at zero replicas.
PODS_SERVICE_SUFFIX: Final = "-pods"
ACTIVATOR_SLICE_SUFFIX: Final = "-activator"
RESERVED_NAME_SUFFIXES: Final = (
    "-metrics",
    PODS_SERVICE_SUFFIX,
    ACTIVATOR_SLICE_SUFFIX,
    "-canary",
    "-model-config",
    "-slo",
    ADMIN_KEY_SECRET_SUFFIX,
    ENGINE_JOBS_POLICY_SUFFIX,
)

#: Value = name of the owning InferenceService; the key selects every child of one service
#: and, by "key exists", every pod of any InferenceService (exclusive GPU placement).
LABEL_ISVC: Final = f"{GROUP}/inferenceservice"
LABEL_ENGINE_KEY: Final = f"{GROUP}/engine-key"
LABEL_REQUEST_KEY: Final = f"{GROUP}/build-request-key"
LABEL_PROFILE_KEY: Final = f"{GROUP}/profile-key"
#: With spec.autoscaling.backlogRotation, on every Triton pod: "in" (the template's value) puts it
#: in the Service's endpoints, "held" keeps it out while its backlog drains (the operator flips it).
LABEL_ROTATION: Final = f"{GROUP}/rotation"
ROTATION_IN: Final = "in"
ROTATION_HELD: Final = "held"
#: On the pods of a canary Deployment (spec.rollout.strategy Canary), and in its selector: the
#: stable Deployment's pods do not carry it (their template and selector stay as they were).
LABEL_TRACK: Final = f"{GROUP}/track"
TRACK_CANARY: Final = "canary"
#: On a ReplicaSet of the old GPU product that a move released from the Deployment (value "true"):
#: its pods serve until every pod on the new product is ready, then it is deleted.
LABEL_RELEASED_BY_MOVE: Final = f"{GROUP}/released-by-move"

ANNOTATION_ENGINE_KEY: Final = f"{GROUP}/engine-key"
ANNOTATION_CONFIG_HASH: Final = f"{GROUP}/config-hash"
ANNOTATION_BUILD_REQUEST: Final = f"{GROUP}/build-request"
#: On a Deployment the operator paused for a GPU product move's hand-over (step 1): a plan without
#: it is drift, so the next apply drops the pause with it (a pause set by hand is left alone).
ANNOTATION_PAUSED_FOR_MOVE: Final = f"{GROUP}/paused-for-move"

# --- Conditions ------------------------------------------------------------------

CONDITION_READY: Final = "Ready"
CONDITION_ENGINE_READY: Final = "EngineReady"
CONDITION_ROLLOUT_READY: Final = "RolloutReady"
CONDITION_SLO_MET: Final = "SLOMet"
CONDITION_SCALING_ACTIVE: Final = "ScalingActive"
CONDITION_DEGRADED: Final = "Degraded"
#: Whether the engine's profile agrees with what the serving pods compute (their own counters).
CONDITION_PROFILE_ACCURATE: Final = "ProfileAccurate"
#: Whether a new engine is held back by the regression gate (the old one keeps serving).
CONDITION_ROLLOUT_BLOCKED: Final = "RolloutBlocked"
#: For a service listing several GPU products: which one serves, and why (status.gpu has the figures).
CONDITION_GPU_PRODUCT_CHOSEN: Final = "GpuProductChosen"
#: Which part of a request's time in Triton is the largest (status.observed has every part's figure).
CONDITION_LATENCY_BREAKDOWN: Final = "LatencyBreakdown"
CONDITION_TYPES: Final = (
    CONDITION_READY,
    CONDITION_ENGINE_READY,
    CONDITION_ROLLOUT_READY,
    CONDITION_SLO_MET,
    CONDITION_SCALING_ACTIVE,
    CONDITION_DEGRADED,
    CONDITION_PROFILE_ACCURATE,
    CONDITION_ROLLOUT_BLOCKED,
    CONDITION_GPU_PRODUCT_CHOSEN,
    CONDITION_LATENCY_BREAKDOWN,
)

STATUS_TRUE: Final = "True"
STATUS_FALSE: Final = "False"
STATUS_UNKNOWN: Final = "Unknown"

# Reasons (CamelCase, stable: users and alerts match on them).
REASON_RECONCILING: Final = "Reconciling"
REASON_INVALID_SPEC: Final = "InvalidSpec"
REASON_ENGINE_BUILDING: Final = "EngineBuilding"
REASON_ENGINE_BUILT: Final = "EngineBuilt"
REASON_ENGINE_CACHED: Final = "EngineCached"
REASON_ENGINE_BUILD_FAILED: Final = "EngineBuildFailed"
#: EngineReady False while a new engine is measured in its profile Job (the old one keeps serving).
REASON_ENGINE_PROFILING: Final = "EngineProfiling"
#: Normal Event: the profile Job measured the engine where it serves.
EVENT_ENGINE_PROFILED: Final = "EngineProfiled"
#: Warning Event: the profile Job failed; the engine is served without a profile.
EVENT_PROFILE_FAILED: Final = "ProfileFailed"
#: RolloutBlocked True and a Warning Event: the new engine is slower than the serving one.
REASON_LATENCY_REGRESSION: Final = "LatencyRegression"
#: RolloutBlocked False: the new engine is within the regression budget (or faster).
REASON_WITHIN_REGRESSION_BUDGET: Final = "WithinRegressionBudget"
#: RolloutBlocked False: a regression beyond the budget, accepted by the user's annotation.
REASON_REGRESSION_ACCEPTED: Final = "RegressionAccepted"
#: RolloutBlocked False: nothing held (no new engine, or nothing to compare it with).
REASON_NOTHING_HELD: Final = "NothingHeld"
#: EngineReady False while a new engine serves a share of traffic on its own replicas
#: (spec.rollout.strategy Canary); RolloutBlocked False with this reason while it is analysed.
REASON_CANARY_ANALYSIS: Final = "CanaryAnalysis"
#: Normal Event and RolloutBlocked False: the canary held up against the stable replicas; promoted.
REASON_CANARY_PROMOTED: Final = "CanaryPromoted"
#: RolloutBlocked True and a Warning Event: the canary was slower or failed more; rolled back.
REASON_CANARY_ROLLED_BACK: Final = "CanaryRolledBack"
#: Normal Event: the canary Deployment was created for a new engine.
EVENT_CANARY_STARTED: Final = "CanaryStarted"
#: Normal Event: a running canary was removed because the spec changed (its engine is not asked for).
EVENT_CANARY_STOPPED: Final = "CanaryStopped"
#: RolloutReady False, a Warning Event: an object this service does not control has a child's name.
REASON_CHILD_NAME_TAKEN: Final = "ChildNameTaken"
#: A status write had fields past the CRD's maxLength / maxItems: cut to fit (the Event names them).
REASON_STATUS_CUT: Final = "StatusCut"
#: An engine Job's container left a termination message that is not its result (cut at the
#: kubelet's 4096 bytes, or not JSON of the result's shape).
REASON_BUILD_RESULT_UNREADABLE: Final = "BuildResultUnreadable"
REASON_PROFILE_RESULT_UNREADABLE: Final = "ProfileResultUnreadable"
#: The built engine's inputs or outputs exceed what status.engine holds (count, name length, rank),
#: and the serving config is rendered from status.engine: it cannot be served.
REASON_ENGINE_TENSORS_TOO_LARGE: Final = "EngineTensorsTooLarge"
#: The engine store's volume is full: the build published nothing (`tailpilot build`).
REASON_ENGINE_STORE_FULL: Final = "EngineStoreFull"
#: Annotation naming a new engine (its key or first 12 characters) to serve despite a regression.
ANNOTATION_ACCEPT_ENGINE: Final = f"{GROUP}/accept-engine"
#: Annotation the activator sets (RFC 3339 UTC) when a request arrives for a service at zero replicas.
ANNOTATION_WAKE_REQUESTED: Final = f"{GROUP}/wake-requested-at"
#: Annotation the activator sets once a cold start ended: when its first request was held, the wake
#: landed, a ready replica was seen and the first answer came back (JSON, `tailpilot.api.cold_start`).
ANNOTATION_COLD_START: Final = f"{GROUP}/cold-start"
#: The EndpointSlice field manager value of the slices the operator writes (the EndpointSlice
#: controller leaves slices with another `endpointslice.kubernetes.io/managed-by` alone).
ENDPOINT_SLICE_MANAGER: Final = f"operator.{GROUP}"
#: Events: a service went to zero replicas; a request at zero woke it.
EVENT_SCALED_TO_ZERO: Final = "ScaledToZero"
EVENT_WOKEN: Final = "Woken"
#: Normal Event: a cold start's time broken down into its parts (status.coldStart).
EVENT_COLD_START: Final = "ColdStart"
#: Warning Event: a CPU engine's profile was measured under another CPU limit than its pods'.
EVENT_PROFILE_CPU_LIMIT_MISMATCH: Final = "ProfileCPULimitMismatch"
EVENT_REPLICAS_HELD_OUT: Final = "ReplicasHeldOut"
EVENT_REPLICAS_RETURNED: Final = "ReplicasReturned"
#: An optional child (metrics Service, ServiceMonitor, PrometheusRule) deleted because the spec turned it off.
EVENT_CHILD_REMOVED: Final = "ChildRemoved"
#: Warning Event: an SLO burn-rate alert about the service started firing (Alertmanager's webhook).
EVENT_SLO_ALERT_FIRING: Final = "SLOAlertFiring"
#: Normal Event: a firing SLO alert about the service resolved.
EVENT_SLO_ALERT_RESOLVED: Final = "SLOAlertResolved"
#: Warning Event: a reconcile pass raised; it is retried with a doubling back-off.
REASON_RECONCILE_FAILED: Final = "ReconcileFailed"
#: Warning Event: a control decision or a canary analysis raised; it is retried within its period.
REASON_DECISION_FAILED: Final = "DecisionFailed"
#: Build failure reasons that only a spec change can cure (the request itself is at fault): such a
#: build is not retried; a spec change makes another request, hence another build. Failures of the
#: model's content (unreachable, wrong checksum, not a valid model) are retried with back-off, since
#: the file at the same URI can be fixed.
TERMINAL_BUILD_REASONS: Final = frozenset(
    {
        "ModelChecksumRequired",
        "UnsupportedModelUri",
        "CalibrationRequired",
        "UnsupportedPrecision",
        "UnsupportedServingVariant",
        "InvalidBuildRequest",
        # The engine's result does not fit the termination message: a repeat finds the same engine
        # in the store and reports it the same way.
        "BuildResultTooLarge",
    }
)
#: What the operator finds wrong with a build's result, equally final: a repeat finds the same
#: engine in the store and reports it the same way.
TERMINAL_RESULT_REASONS: Final = frozenset({REASON_BUILD_RESULT_UNREADABLE, REASON_ENGINE_TENSORS_TOO_LARGE})
REASON_ENGINE_BUILD_PENDING: Final = "EngineBuildPending"
REASON_WAITING_FOR_ENGINE: Final = "WaitingForEngine"
REASON_CHOOSING_GPU_PRODUCT: Final = "ChoosingGpuProduct"
REASON_CHOOSING_PRECISION: Final = "ChoosingPrecision"
REASON_ROLLING_OUT: Final = "RollingOut"
REASON_ROLLED_OUT: Final = "RolledOut"
REASON_ROLLOUT_STALLED: Final = "RolloutStalled"
#: A move's hand-over: the old product's pods kept serving beside the new ones, then gone.
REASON_OLD_PODS_KEPT: Final = "OldPodsKeptForMove"
REASON_OLD_PODS_GONE: Final = "OldPodsGoneAfterMove"
REASON_SLO_MET: Final = "WithinSLO"
REASON_SLO_VIOLATED: Final = "SLOViolated"
REASON_NO_TRAFFIC: Final = "NoTraffic"
REASON_METRICS_UNAVAILABLE: Final = "MetricsUnavailable"
#: ScalingActive False: spec.monitoring.prometheusUrl names an endpoint the platform does not allow
#: (the operator never contacts it).
REASON_PROMETHEUS_URL_NOT_ALLOWED: Final = "PrometheusUrlNotAllowed"
REASON_AUTOSCALING_ACTIVE: Final = "AutoscalingActive"
REASON_AUTOSCALING_DRY_RUN: Final = "DryRun"
REASON_AUTOSCALING_DISABLED: Final = "AutoscalingDisabled"
REASON_ALL_READY: Final = "AllConditionsMet"
REASON_NOT_READY: Final = "NotReady"
#: ProfileAccurate: the profile's service time is within the tolerance of the serving pods'.
REASON_PROFILE_MATCHES_SERVING: Final = "ProfileMatchesServing"
#: ProfileAccurate False: the serving pods compute at another speed than the profile says.
REASON_PROFILE_DISAGREES: Final = "ProfileDisagrees"
#: ProfileAccurate False: the engine in service has no profile; the service time is learned online.
REASON_NO_PROFILE: Final = "NoProfile"
#: ScalingActive Unknown: no profile and no traffic yet to learn the service time from.
REASON_LEARNING_SERVICE_TIME: Final = "LearningServiceTime"
#: LatencyBreakdown True: the largest part of a request's time is waiting in Triton's queue (more
#: replicas or larger batches shorten it).
REASON_QUEUE_DOMINATED: Final = "QueueDominated"
#: LatencyBreakdown True: the largest part is compute infer, the model's own execution (a faster
#: engine or precision shortens it; more replicas do not).
REASON_COMPUTE_DOMINATED: Final = "ComputeDominated"
#: LatencyBreakdown True: the largest part is compute input, moving the request's inputs to the model.
REASON_COMPUTE_INPUT_DOMINATED: Final = "ComputeInputDominated"
#: LatencyBreakdown True: the largest part is compute output, taking the outputs from the batch's results.
REASON_COMPUTE_OUTPUT_DOMINATED: Final = "ComputeOutputDominated"
#: LatencyBreakdown True: the largest part is Triton's own handling outside the queue and the compute
#: steps (the server time the three compute parts leave).
REASON_SERVER_OVERHEAD_DOMINATED: Final = "ServerOverheadDominated"
#: LatencyBreakdown True: what the clients see beyond Triton's P99 (their P99, from the spec's
#: clientLatencyP99Query, less the server's) is longer than every part of a request's time in Triton.
REASON_OUTSIDE_SERVER_DOMINATED: Final = "OutsideServerDominated"

# --- GPUs ----------------------------------------------------------------------------

GPU_RESOURCE: Final = "nvidia.com/gpu"
#: Set by NVIDIA GPU feature discovery, e.g. "NVIDIA-H100-80GB-HBM3".
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU_TAINT_KEY: Final = "nvidia.com/gpu"
GPU_TAINT_VALUE: Final = "present"
GPU_TAINT_EFFECT: Final = "NoSchedule"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
#: The label the API server puts on every namespace, holding its name (namespace selectors match it).
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"

#: Known GPU products (node label value -> memory in GiB); the semantic validation warns on others.
KNOWN_GPU_PRODUCTS: Final[dict[str, int]] = {
    "NVIDIA-H100-80GB-HBM3": 80,
    "NVIDIA-H100-NVL": 94,
    "NVIDIA-H200": 141,
    "NVIDIA-A100-SXM4-80GB": 80,
    "NVIDIA-A100-SXM4-40GB": 40,
    "NVIDIA-A100-PCIE-40GB": 40,
    "NVIDIA-A10G": 24,
    "NVIDIA-L4": 24,
    "NVIDIA-L40S": 48,
    "Tesla-T4": 16,
}

# --- Alerts (Prometheus label names cannot hold "." or "/") ----------------------------------

#: Label on every TailPilot alert; Alertmanager routes `tailpilot="operator"` to the operator's webhook.
ALERT_ROUTE_LABEL: Final = "tailpilot"
ALERT_ROUTE_VALUE: Final = "operator"
#: Label on every TailPilot alert holding its service's UID. An alert is taken only for the service
#: of that UID: a tenant's own rule naming another namespace's service (which the alert's namespace
#: and name labels alone would steer), or an alert of a deleted service of the same name, is not.
ALERT_SERVICE_UID_LABEL: Final = "tailpilot_service_uid"
#: Labels that carry the service's identity on series and alerts (set by the ServiceMonitor's relabeling).
METRIC_LABEL_NAMESPACE: Final = "namespace"
METRIC_LABEL_ISVC: Final = "inferenceservice"

# --- Triton ----------------------------------------------------------------------------

#: Triton 2.51 (the release the project's local Triton and tritonclient pin).
DEFAULT_TRITON_IMAGE: Final = "nvcr.io/nvidia/tritonserver:24.10-py3"
TRITON_HTTP_PORT: Final = 8000
TRITON_GRPC_PORT: Final = 8001
TRITON_METRICS_PORT: Final = 8002
PORT_NAME_HTTP: Final = "http"
PORT_NAME_GRPC: Final = "grpc"
PORT_NAME_METRICS: Final = "metrics"

#: Mount path of the engine store PVC in build Jobs and serving pods.
ENGINE_STORE_MOUNT: Final = "/engines"
#: Sub-directory of the store holding published engines: engines/<key>/repository/<model>/1/
#: (the layout of tailpilot.builders.store; a test checks they agree).
ENGINE_STORE_ENGINES_DIR: Final = "engines"
ENGINE_STORE_REPOSITORY_DIR: Final = "repository"
#: Sub-directory of an engine holding its cached profiles: engines/<key>/profiles/<profileKey>.json.
ENGINE_STORE_PROFILES_DIR: Final = "profiles"
#: Where the build Job mounts pvc:// model sources (`tailpilot build --pvc-root`).
PVC_SOURCE_ROOT: Final = "/mnt/pvc"
#: Default name of the engine store PVC (one per namespace; the chart/docs explain how to create it).
DEFAULT_ENGINE_STORE_CLAIM: Final = "tailpilot-engines"
