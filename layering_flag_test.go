package autopar

import (
	"flag"
	"fmt"
	"os"
)

// layeringFlag (flag -layering) overrides chooseLayering in every compile of the
// package's tests and benchmarks: "moved", "base", or "" (the search's choice), to measure
// one layering against the other. Under -count-trace the choice's seeds are logged.
var layeringFlag = flag.String("layering", "", "override the search's layering: moved, base (measurement only)")

func init() {
	layeringChoice = func(moved bool) bool {
		switch *layeringFlag {
		case "moved":
			return true
		case "base":
			return false
		}
		return moved
	}
	layeringTrace = func(mb int, base, moved float64) {
		if *countTraceFlag {
			fmt.Fprintf(os.Stderr, "layering: count %d: first plans %.6f s with the parts beside their params, %.6f s moved\n", mb, base, moved)
		}
	}
}
