# attnplug: the host, its plugins, and their checks.
GO       ?= go
BIN      := bin
PLUGINS  := fa3 flashinfer aiter ascend dsa intel_xpu
# VERSION is what attnplug version prints: the nearest tag, else the
# commit, with -dirty for uncommitted changes.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
LDFLAGS  := -X main.version=$(VERSION)
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1

.PHONY: device-code device-syntax all build plugins run check deps test test-short test-go test-python test-python-install test-gpu gpu-bins bench-python lint proto proto-python proto-check golden bench clean api-check api-snapshot

all: build

## build: the host at bin/attnplug and the plugins in bin/plugins/
build: plugins
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/attnplug ./cmd/host

plugins:
	@mkdir -p $(BIN)/plugins
	@for p in $(PLUGINS); do \
		$(GO) build -o $(BIN)/plugins/attnplug-backend-$$p ./plugins/$$p || exit 1; \
	done

## run: build everything and replay the sample batches through every backend
run: build
	$(BIN)/attnplug demo

## check: a first try (the README says how long it took): go vet, the
## short tests of the contract, the plugins' rules, the registry, the wire,
## the engine and the JSON Lines stream, and attnplug demo through the real
## host and plugins; make test is the full suite
check: build
	$(GO) vet ./...
	$(GO) test -short ./core/... ./plugins/... ./registry/... ./wire/... ./engine/... ./jsonl/...
	$(BIN)/attnplug demo

## test: the full suite: vet, format check, the Go tests (under the race
## detector, and the CPU-bound ones it would slow most without it), the
## Python package's tests and its offline install
test: deps lint test-go test-python test-python-install

## deps: what make test needs besides Go (a python3 with grpc, protobuf,
## venv and wheel), checked first, in a second, and installed from
## Debian's packages where apt-get and root allow (scripts/deps.sh)
deps:
	@sh scripts/deps.sh

# test-go: every package under the race detector, then, without it, the
# tests it would slow most and that check no concurrency of their own: the
# conformance suite run many times, the comparisons of tens of thousands of
# requests with sglang's answers (they skip under -race, saying so)
test-go:
	$(GO) test -race -timeout 12m ./...
	$(GO) test -timeout 12m ./conformance/ ./internal/reference/

# PYTHON is a python3 that imports grpc and google.protobuf: the first on
# PATH, else Debian's (python3-grpcio, python3-protobuf).
PYTHON ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import grpc, google.protobuf' 2>/dev/null && { command -v $$p; break; }; done)

## test-python: the attnplug Python package's tests, against a real attnplug serve
test-python: build
	@test -n "$(PYTHON)" || { echo "test-python: no python3 imports grpc and google.protobuf (apt-get install python3-grpcio python3-protobuf)"; exit 1; }
	$(GO) build -o $(BIN)/test/attnplug-backend-fault ./internal/testplugins/fault
	$(GO) build -o $(BIN)/test/attnplug-backend-liar ./internal/testplugins/liar
	cd python && PYTHONPATH=testing ATTNPLUG_BIN="$(CURDIR)/$(BIN)" ATTNPLUG_FAULT_BIN="$(CURDIR)/$(BIN)/test/attnplug-backend-fault" \
		$(PYTHON) -m unittest discover -s tests -v

## test-python-install: the offline install of the README on Debian's
## python3 (PEP 668): a new venv with --system-site-packages, the package
## installed from python/ with no index and no build isolation, and
## attnplug and attnplug.sglang imported from the venv, outside the tree
## (needs python3-venv and python3-wheel besides grpcio and protobuf)
test-python-install:
	@test -n "$(PYTHON)" || { echo "test-python-install: no python3 imports grpc and google.protobuf (apt-get install python3-grpcio python3-protobuf)"; exit 1; }
	@$(PYTHON) -c 'import ensurepip, wheel' 2>/dev/null || { echo "test-python-install: $(PYTHON) cannot make a venv or build a wheel (apt-get install python3-venv python3-wheel)"; exit 1; }
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	cp -R python "$$tmp/src" && rm -rf "$$tmp/src/build" "$$tmp/src"/*.egg-info && \
	$(PYTHON) -m venv --system-site-packages "$$tmp/venv" && \
	cd "$$tmp" && env -u PYTHONPATH "$$tmp/venv/bin/pip" --isolated install --quiet --no-build-isolation --no-index ./src && \
	rm -rf "$$tmp/src" && \
	env -u PYTHONPATH "$$tmp/venv/bin/python" -c 'import sys, attnplug, attnplug.sglang; \
		assert attnplug.__file__.startswith(sys.prefix + "/"), attnplug.__file__; \
		print("test-python-install: attnplug and attnplug.sglang import from", sys.prefix)'

## bench-python: python -m attnplug_testing.bench (python/testing) against bin/attnplug
bench-python: build
	cd python && PYTHONPATH=testing $(PYTHON) -m attnplug_testing.bench --attnplug "$(CURDIR)/$(BIN)/attnplug"

## test-gpu: the GPU tests (device kernels against the fp64 reference on
## random batches, a 61-layer decode step in a CUDA graph, a kernel fault,
## the executor's plans and the memory they give back); needs a CUDA GPU
## and NVRTC, and fails instead of skipping without them
test-gpu:
	ATTNPLUG_REQUIRE_GPU=1 $(GO) test -count=1 -v -timeout 30m ./cuda/ ./launch/cudaexec/ ./internal/gpucheck/

## device-code: build the device code ahead of time (PTX and cubins): the
## plugins' kernels (devkernels/images) and the verification layer's fills
## (devkernels/fill/images); needs nvcc, not a GPU. Commit the result: go
## test ./devkernels/... fails while the images are stale. SET=fill (or
## kernels) builds one set alone
SET ?= kernels fill
device-code:
	@for s in $(SET); do \
		case $$s in kernels) out=devkernels/images;; fill) out=devkernels/fill/images;; *) echo "device-code: SET $$s: want kernels or fill"; exit 2;; esac; \
		$(GO) run ./devkernels/gen -set $$s -out $$out || exit 1; \
	done

## device-syntax: check the device code's sources (both sets) with clang's
## CUDA front end, where there is no nvcc and no GPU: their C++ as NVRTC
## takes it, not the PTX of their asm (apt-get install clang-19; CLANG
## names another clang++)
CLANG ?= clang++-19
device-syntax:
	@for s in kernels fill; do $(GO) run ./devkernels/gen -set $$s -syntax $(CLANG) || exit 1; done

## gpu-bins: the GPU test binaries, for a GPU machine without Go:
## copy .device/ there and run .device/gpucheck.test -test.v (and
## cuda.test, cudaexec.test)
gpu-bins:
	CGO_ENABLED=0 $(GO) test -c -o .device/gpucheck.test ./internal/gpucheck
	CGO_ENABLED=0 $(GO) test -c -o .device/cuda.test ./cuda
	CGO_ENABLED=0 $(GO) test -c -o .device/cudaexec.test ./launch/cudaexec
	CGO_ENABLED=0 $(GO) build -o .device/gen ./devkernels/gen

## test-short: every package's tests but the long system tests, which
## skip, each saying why
test-short:
	$(GO) test -short ./...

## lint: go vet, gofmt and go mod tidy must leave nothing to change
lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@$(GO) mod tidy -diff >/dev/null || { echo "go mod tidy would change go.mod/go.sum"; exit 1; }

## proto: regenerate the committed protobuf code (needs protoc)
proto:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc -I wire/pluginv1 \
		--go_out=wire/pluginv1 --go_opt=paths=source_relative \
		--go-grpc_out=wire/pluginv1 --go-grpc_opt=paths=source_relative \
		wire/pluginv1/plugin.proto
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc -I api/dispatchv1 \
		--go_out=api/dispatchv1 --go_opt=paths=source_relative \
		--go-grpc_out=api/dispatchv1 --go-grpc_opt=paths=source_relative \
		api/dispatchv1/dispatch.proto

	$(MAKE) proto-python

# The Python code is generated from a copy of dispatch.proto placed under
# attnplug/_pb/, so that its descriptors have names no other package
# registers. The Python package speaks the engine API only.
PY_PB := python/attnplug/_pb

## proto-python: regenerate the Python package's protobuf code with Debian's
## protoc (protobuf-compiler) and gRPC plugin (protobuf-compiler-grpc)
proto-python:
	@command -v protoc >/dev/null && command -v grpc_python_plugin >/dev/null || \
		{ echo "proto-python: needs protoc and grpc_python_plugin (apt-get install protobuf-compiler protobuf-compiler-grpc)"; exit 1; }
	@stage=$$(mktemp -d) && trap 'rm -rf "$$stage"' EXIT && mkdir -p "$$stage/attnplug/_pb" && \
	cp api/dispatchv1/dispatch.proto "$$stage/attnplug/_pb/dispatch.proto" && \
	protoc -I "$$stage" --python_out=python "$$stage/attnplug/_pb/dispatch.proto" && \
	protoc -I "$$stage" --python_out=python --plugin=protoc-gen-grpc_python="$$(command -v grpc_python_plugin)" \
		--grpc_python_out=python "$$stage/attnplug/_pb/dispatch.proto"

## proto-check: fail when the committed generated code is not current
proto-check: proto
	@git diff --exit-code -- '*.pb.go' '$(PY_PB)' || { echo "generated code is stale: run make proto and commit"; exit 1; }

## golden: regenerate internal/reference/testdata/golden.jsonl.gz, the
## requests with the answers sglang's code gives them (needs python3 and
## the reference file: $$ATTNPLUG_REFERENCE, else shared/reference beside
## the repository or above it)
golden:
	$(GO) generate ./internal/reference

## api-check: the SDK's API against the snapshot of the last release (make test runs it too)
api-check:
	$(GO) run ./internal/apicheck

## api-snapshot: at a release, record the SDK's API: make api-snapshot VERSION=v0.2.0
## (VERSION must be a release version; the default, from git describe, is not)
api-snapshot:
	$(GO) run ./internal/apicheck -write $(VERSION)

## bench: the Go benchmarks and attnplug bench
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./core/... ./jsonl/... ./registry/... ./shm/...
	bin/attnplug bench

clean:
	rm -rf $(BIN)
