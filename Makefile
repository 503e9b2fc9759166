# TailPilot: every entry point a developer, CI or a user needs.
#   make demo    the main job: the local cluster, the operator, a service, its decisions
#   make test    every test tier (pure, local cluster, real Triton/Prometheus) + lint
# Everything is installed by the targets themselves, idempotently; slow builds are
# cached outside the repository in $(TAILPILOT_CACHE), keyed by pinned versions.
SHELL := /bin/bash
.DEFAULT_GOAL := help

export TAILPILOT_CACHE ?= $(HOME)/.cache/tailpilot
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: help
help:
	@grep -E '^[a-z-]+:.*## ' Makefile | sed 's/:.*## /\t/' | column -t -s $$'\t'

.PHONY: system-deps
system-deps: ## apt packages (openssl, prometheus, alertmanager, libpython3.11, ...)
	@bash e2e/install-system-deps.sh

# The venv is rebuilt when the dependencies change; pip's own cache makes that fast.
$(STAMP): pyproject.toml requirements.lock
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PIP) install -q --upgrade pip >/dev/null
	$(PIP) install -q -c requirements.lock -e '.[triton,dev,sources]'
	@touch $(STAMP)

.PHONY: venv
venv: $(STAMP) ## the project's Python environment in .venv/

.PHONY: binaries
binaries: venv ## build (once, cached) etcd, kube-*, kubectl, kwok, prometheus, versitygw from upstream Go modules
	@bash e2e/build-binaries.sh
	@$(PY) -P -m tailpilot_e2e.tools link-binaries $(VENV)/bin

.PHONY: helm
helm: ## install helm (pinned, cached) into .venv/bin
	@ln -sf "$$(bash e2e/install-helm.sh)" $(VENV)/bin/helm

.PHONY: hf-hub
hf-hub: ## install olah (a self-hosted Hugging Face Hub, pinned, cached) for the hf:// source's tests
	@bash e2e/install-olah.sh >/dev/null

.PHONY: tools
tools: system-deps venv binaries helm hf-hub

.PHONY: cluster-up
cluster-up: tools ## start the local cluster (idempotent); kubeconfig in .cluster/kubeconfig
	@$(PY) -P -m tailpilot_e2e.cluster up

.PHONY: cluster-down
cluster-down: ## stop every process of the local clusters (the real-pods one too) and remove their state
	@test -x $(PY) && $(PY) -P -m tailpilot_e2e.cluster down || echo "no venv: nothing to stop"

# mypy and import-linter cannot follow the editable install's import hook (six folders mapped into
# one package), so they read a symlinked tree laid out as Python imports it.
TYPECHECK := build/typecheck

.PHONY: lint
lint: venv ## ruff, mypy --strict, import-linter layers, CRD and chart drift
	$(VENV)/bin/ruff check .
	@$(PY) -P -m tailpilot_e2e.tools link-source-tree $(TYPECHECK) >/dev/null
	MYPYPATH=$(TYPECHECK) $(VENV)/bin/mypy -p tailpilot
	PYTHONPATH=$(TYPECHECK) $(VENV)/bin/lint-imports
	$(VENV)/bin/tailpilot crds --check
	$(PY) -P -m tailpilot.bench.quotes --check

.PHONY: test
test: tools lint ## every test tier; starts and stops what it needs
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=40 -m "not benchmark"

.PHONY: test-slo-loop
test-slo-loop: tools ## the SLO-loop test alone, with its timeline: a load step answered on real pods (~5 min)
	$(VENV)/bin/pytest -q -s -p no:cacheprovider -m slo_loop tests/real_pods/test_slo_loop.py

# `python -P`: the repository root must not shadow the stdlib `operator` module with operator/.
.PHONY: bench
bench: venv ## the policy benchmark: TailPilot vs baselines vs oracle on every trace, then the GPU product and scale-to-zero pages; rewrites docs/benchmarks and the figures docs quote from it (~11 min)
	$(PY) -P -m tailpilot.bench.run
	$(PY) -P -m tailpilot.bench.gpu_products
	$(PY) -P -m tailpilot.bench.scale_to_zero

# The policy benchmark on the measured profile of the example model on this CPU. That engine serves
# ~12x the requests of the default profile per replica, and a simulated hour's cost grows with its
# requests, so this runs one start-up time (Ts = 30 s), the policies the goals and the robustness
# table read, and every trace but T8 (its oracle alone takes 2-5 min on such an engine, and at
# Ts = 30 s it has no SLO goal) (docs/benchmarks/method.md, "The measured CPU profile"). Its own
# table: the default README.md and results.csv are left alone. MEASURED_PROFILE, MEASURED_OUT and
# MEASURED_TRACES may be overridden.
MEASURED_PROFILE ?= bench/profiles/example-cpu.json
MEASURED_OUT ?= docs/benchmarks/measured-cpu
MEASURED_TRACES ?= T1-poisson,T2-gamma-cv2,T2-gamma-cv4,T3-mmpp2,T4-diurnal,T5-step,T6-spike,$\
	T7-azure-conv,T9-flash-crowd,T10-ramp
MEASURED_POLICIES := static-peak,hpa-util70,keda-queue,knative-kpa,clipper-aimd+hpa,wva-saturation,$\
	tailpilot,tailpilot-profile-0.7x,tailpilot-profile-1.4x,tailpilot-profile-slope,oracle-realizable

.PHONY: bench-measured
bench-measured: venv ## the policy benchmark on the measured CPU profile (bench/profiles/example-cpu.json), Ts = 30 s, into docs/benchmarks/measured-cpu/ (~18 min)
	@test -f "$(MEASURED_PROFILE)" || { echo "no $(MEASURED_PROFILE): the measured profile.json of the example model is not there yet" >&2; exit 1; }
	$(PY) -P -m tailpilot.bench.run --profile "$(MEASURED_PROFILE)" --ts 30 --traces "$(MEASURED_TRACES)" \
		--policies "$(MEASURED_POLICIES)" --out "$(MEASURED_OUT)"

.PHONY: bench-batching
bench-batching: venv ## adaptive batching vs the best static batching: capacity within the SLO (~5 min)
	$(PY) -P -m tailpilot.bench.batching_capacity

.PHONY: bench-rotation
bench-rotation: venv ## TailPilot with and without holding backlogged replicas out of the Service (~4 min)
	$(PY) -P -m tailpilot.bench.run --no-write --policies tailpilot,tailpilot-rotation,oracle-realizable

.PHONY: bench-surge
bench-surge: venv ## TailPilot with (its default) and without the surge check (~2 min)
	$(PY) -P -m tailpilot.bench.run --no-write --policies tailpilot-no-surge,tailpilot,oracle-realizable

.PHONY: bench-fast-loop
bench-fast-loop: venv ## the operator's CPU for reading 500 services' pods every 2 s over real HTTP (~1 min)
	$(PY) -P -m tailpilot.bench.fast_loop_cost --services 500 --pods 2 --seconds 30

.PHONY: bench-activator
bench-activator: venv ## the activator's added latency (HTTP, gRPC; 1 and 16 in flight) and its RSS holding the most its bounds admit (~30 s)
	$(PY) -P -m tailpilot.bench.activator_overhead

.PHONY: bench-bound
bench-bound: venv ## what any causal policy must hold before T5's step, T6's spike and T9's crowds, against the oracle (~15 s)
	$(PY) -P -m tailpilot.bench.causal_bound

.PHONY: bench-static
bench-static: venv ## the cheapest constant fleet keeping both SLO goals on each trace, against the oracle (~30 s)
	$(PY) -P -m tailpilot.bench.static_fleets

.PHONY: bench-products
bench-products: venv ## GPU product choice vs one product picked by hand (H100, L4): money, SLO, moves per trace, Ts = 30 and 90 s, into docs/benchmarks/gpu-products.md (~1 min)
	$(PY) -P -m tailpilot.bench.gpu_products

.PHONY: bench-zero
bench-zero: venv ## scale to zero on idle-heavy traces: TailPilot vs Knative KPA vs one replica, into docs/benchmarks/scale-to-zero.md (~1 min)
	$(PY) -P -m tailpilot.bench.scale_to_zero

.PHONY: bench-quick
bench-quick: venv ## a one-minute subset of the policy benchmark
	$(PY) -P -m tailpilot.bench.run --quick

.PHONY: bench-validate
bench-validate: venv system-deps ## the simulator against real Triton: 3 loads x 1-2 replicas x 2 batchings, and the measured example profile (~17 min, machine otherwise idle)
	$(PY) -P -m tailpilot.bench.validate --out docs/benchmarks/validation.md --profile-out bench/profiles/example-cpu.json

.PHONY: bench-batcher-probe
bench-batcher-probe: venv system-deps ## whether a request arriving while Triton's instance is busy joins the waiting batch (the race the simulator draws; ~3 min)
	$(PY) -P -m tailpilot.bench.batcher_probe --out docs/benchmarks/batcher-probe.md

.PHONY: bench-engine
bench-engine: venv system-deps ## naive vs optimized vs int8 engines served by real Triton, into docs/benchmarks/engine.md (~2 min)
	$(PY) -P -m tailpilot.bench.engine

.PHONY: bench-p99-estimate
bench-p99-estimate: tools ## the service P99 estimate vs client-side P99 (real Triton x2, real Prometheus)
	$(VENV)/bin/pytest -q -p no:cacheprovider -s tests/controllers/test_ctrl_prometheus_live.py

.PHONY: bench-scale
bench-scale: tools ## 500 InferenceServices of 2 pods on a dedicated local cluster with a real Prometheus: time to Ready, RSS, the fast loop's cost at rest (~20 min)
	$(PY) -P -m tailpilot_e2e.bench_scale

.PHONY: bench-adversarial
bench-adversarial: tools ## one hostile tenant (huge, slow, malformed, silent answers; many URLs) beside calm services: the operator's peak RSS and the calm services' decision periods, before and after (~10 min)
	$(PY) -P -m tailpilot_e2e.bench_adversarial

.PHONY: bench-failover
bench-failover: tools ## operator failover on the local cluster: two elected operators, the leader SIGKILLed 3 times; seconds until the standby acts (~2 min)
	$(PY) -P -m tailpilot_e2e.failover --kills 3

.PHONY: demo
demo: tools ## the main job on the local cluster
	$(PY) -P -m tailpilot_e2e.demo

# The two images (docker/). No registry hosts them: build them, push them where the cluster pulls
# from, and set the chart's image.repository and builder.image.repository to match (README.md,
# "On a real cluster"). The defaults build the names the chart pulls by default, tagged with its
# appVersion (the chart's default tag). PLATFORM: the GPU nodes' architecture, not the build machine's.
REGISTRY ?= ghcr.io/tailpilot
TAG ?= $(shell sed -n 's/^appVersion: *//p' charts/tailpilot/Chart.yaml | tr -d '"')
PLATFORM ?= linux/amd64
DOCKER ?= docker

.PHONY: images
images: ## build the operator and builder images, $(REGISTRY)/tailpilot-{operator,builder}:$(TAG)
	$(DOCKER) build --platform $(PLATFORM) -f docker/operator.Dockerfile -t $(REGISTRY)/tailpilot-operator:$(TAG) .
	$(DOCKER) build --platform $(PLATFORM) -f docker/builder.Dockerfile -t $(REGISTRY)/tailpilot-builder:$(TAG) .

.PHONY: images-push
images-push: images ## build and push both images to $(REGISTRY)
	$(DOCKER) push $(REGISTRY)/tailpilot-operator:$(TAG)
	$(DOCKER) push $(REGISTRY)/tailpilot-builder:$(TAG)
