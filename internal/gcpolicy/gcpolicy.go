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
package gcpolicy

import (
	"os"
	"runtime/debug"
)

// SearchPercent is the GOGC a search runs under.
const SearchPercent = 400

// ForSearch sets the collector's GOGC to SearchPercent, unless the user set GOGC in the
// environment, and returns a func that restores the previous setting.
func ForSearch() (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	old := debug.SetGCPercent(SearchPercent)
	return func() { debug.SetGCPercent(old) }
}
