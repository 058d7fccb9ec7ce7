//go:build !linux

package runtime

import "time"

// ThreadCPU is 0: CPU time per thread is measured on Linux only.
func ThreadCPU() time.Duration { return 0 }

// CPUTimeSupported says whether Options.CPUTime can measure on this system.
const CPUTimeSupported = false
