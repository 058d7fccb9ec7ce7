# autopar — build, test and demo. Every target installs what it needs on a fresh Debian
# machine with Go: lp_solve (the ILP solver behind the sharding pass), graphviz (for SVG
# and PNG renderings) and Open MPI (the multi-process runtime, runtime/mpi).

GO      ?= go
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
FUZZTIME ?= 5m
# FUZZFLAGS go to every fuzz run, e.g. FUZZFLAGS=-parallel=1 on a shared machine.
FUZZFLAGS ?=
# Every fuzz target of the repository, as package:Target; make fuzz runs each in turn for
# $(FUZZTIME). A listed target that does not exist fails the run (go test -fuzz would
# silently pass on it), so a renamed or deleted target is noticed.
FUZZ_TARGETS := ./frontend:FuzzParse ./mesh:FuzzClusterJSON ./mesh:FuzzFlagValues ./mesh:FuzzParseSpec \
	./plan:FuzzParseManual ./plan:FuzzReadPlan .:FuzzPlansLower ./program:FuzzProgramJSON ./render:FuzzReadTrace \
	./frontend/onnx:FuzzImportONNX
# -tags mpi builds runtime/mpi against Open MPI where it is installed (deps installs it);
# without it the package is a stub that says so. Expanded when a recipe runs, after deps.
GOTAGS   = $(shell pkg-config --exists ompi-c 2>/dev/null && echo -tags mpi)

.PHONY: all deps build install test vet fmt-check nocgo demo fuzz bench clean

all: build

deps:
	@if [ ! -f /usr/include/lpsolve/lp_lib.h ] || ! command -v dot >/dev/null 2>&1 || \
		! pkg-config --exists ompi-c 2>/dev/null || ! command -v mpirun >/dev/null 2>&1 || \
		! command -v rsvg-convert >/dev/null 2>&1; then \
		echo "installing liblpsolve55-dev graphviz libopenmpi-dev openmpi-bin librsvg2-bin"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq liblpsolve55-dev graphviz libopenmpi-dev openmpi-bin librsvg2-bin pkg-config >/dev/null; \
	fi

build: deps
	$(GO) build $(GOTAGS) -o autopar ./cmd/autopar

install: deps
	$(GO) install $(GOTAGS) ./cmd/autopar

vet: deps
	$(GO) vet ./...
	@if [ -n "$(GOTAGS)" ]; then echo "$(GO) vet $(GOTAGS) ./..."; $(GO) vet $(GOTAGS) ./...; fi

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Everything but the ILP solver builds without cgo (the plan and program formats, the
# runtime, rendering); a build without it says how to get the solver back. The second line
# names the packages that must not need the search at all (plan/deps_test.go checks that
# they do not import it).
nocgo:
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) build ./plan/... ./program/... ./render/... ./runtime/...

test: deps fmt-check vet nocgo
	$(GO) test $(GOTAGS) -count=1 ./...

# The main job on a bundled model: compile the tiny GPT for 4 CPU devices, train it on the
# runtime, and check every step against the serial interpreter.
demo: build
	./autopar run testdata/models/gpt-tiny.ir --cluster cpu:4 --microbatches 2 --steps 10 --check

fuzz: deps
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t#*:}; \
		if ! $(GO) test -list "^$$name\$$" $$pkg | grep -qx "$$name"; then \
			echo "make fuzz: no fuzz target $$name in package $$pkg" >&2; exit 1; \
		fi; \
		echo "== $$name ($$pkg), $(FUZZTIME)"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -timeout 0 $(FUZZFLAGS); \
	done

bench: deps
	$(GO) test $(GOTAGS) -run '^$$' -bench . -benchmem ./...

clean:
	rm -f autopar
