# autopar — build, test and demo. Every target installs what it needs on a fresh Debian
# machine with Go: lp_solve (the ILP solver behind the sharding pass) and graphviz (for SVG
# and PNG renderings).

GO      ?= go
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
FUZZTIME ?= 5m

.PHONY: all deps build install test vet fmt-check nocgo demo fuzz bench clean

all: build

deps:
	@if [ ! -f /usr/include/lpsolve/lp_lib.h ] || ! command -v dot >/dev/null 2>&1 || ! command -v rsvg-convert >/dev/null 2>&1; then \
		echo "installing liblpsolve55-dev graphviz librsvg2-bin"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq liblpsolve55-dev graphviz librsvg2-bin >/dev/null; \
	fi

build: deps
	$(GO) build -o autopar ./cmd/autopar

install: deps
	$(GO) install ./cmd/autopar

vet: deps
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Everything but the ILP solver builds without cgo (the plan and program formats, the
# runtime, rendering); a build without it says how to get the solver back.
nocgo:
	CGO_ENABLED=0 $(GO) build ./...

test: deps fmt-check vet nocgo
	$(GO) test -count=1 ./...

# The main job on a bundled model: compile the tiny GPT for 4 CPU devices, train it on the
# runtime, and check every step against the serial interpreter.
demo: build
	./autopar run testdata/models/gpt-tiny.ir --cluster cpu:4 --microbatches 2 --steps 10 --check

fuzz: deps
	$(GO) test ./frontend -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME)

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -f autopar
