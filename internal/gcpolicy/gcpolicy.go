// Package gcpolicy sets the garbage collector for a process whose work is one plan search
// (autopar compile, autopar explain, and the suite benchmark that stands for them).
//
// A search allocates many times its live heap: planner builds, energy tables and lp_solve
// models are made and dropped per solve (GPT-1.3B on 4 GPUs allocates about 2.2 GB with a
// live heap under 300 MiB). At Go's default GOGC=100 the collector takes about a fifth of
// the search's CPU; at SearchPercent it collects a quarter as often, for a peak heap about
// twice the default's (docs/DECISIONS.md, "The collector during a search"). Commands that
// run training programs keep Go's default: their live heap is tensors, and a lazier
// collector would multiply it.
//
// The lazier collector alone lets the heap grow to five times the live heap, which on the
// biggest searches (Wide-ResNet-13B on 64 GPUs: a live heap of 420 MiB) passes 2 GiB. A
// search so also runs under a soft memory limit, SearchMemoryLimit: below it GOGC decides,
// near it the collector runs as often as it must to stay under. The limit is soft: a live
// heap above it is not an error, and Go's collector then takes at most about half the CPU
// rather than collecting without pause.
package gcpolicy

import (
	"os"
	"runtime/debug"
)

// SearchPercent is the GOGC a search runs under.
const SearchPercent = 400

// SearchMemoryLimit is the soft memory limit (runtime/debug.SetMemoryLimit) a search runs
// under: 1.75 GiB, so the Go heap of a search stays within issue 13's 2 GiB with room for
// the runtime's own memory, which the limit counts too.
const SearchMemoryLimit = 1792 << 20

// ForSearch sets the collector's GOGC to SearchPercent, unless the user set GOGC in the
// environment, and its soft memory limit to SearchMemoryLimit, unless the user set
// GOMEMLIMIT or a lower limit is already in force; it returns a func that restores the
// previous settings.
func ForSearch() (restore func()) {
	var undo []func()
	if _, set := os.LookupEnv("GOGC"); !set {
		old := debug.SetGCPercent(SearchPercent)
		undo = append(undo, func() { debug.SetGCPercent(old) })
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set && debug.SetMemoryLimit(-1) > SearchMemoryLimit {
		old := debug.SetMemoryLimit(SearchMemoryLimit)
		undo = append(undo, func() { debug.SetMemoryLimit(old) })
	}
	return func() {
		for _, f := range undo {
			f()
		}
	}
}
