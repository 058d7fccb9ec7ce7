//go:build linux

package runtime

import (
	"time"

	"golang.org/x/sys/unix"
)

// ThreadCPU is the CPU time (user and system) the calling OS thread has used: Linux's
// CLOCK_THREAD_CPUTIME_ID (0 where CPUTimeSupported is false). The caller locks its
// goroutine to its thread (runtime.LockOSThread) for differences to mean anything.
func ThreadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// CPUTimeSupported says whether Options.CPUTime can measure on this system.
const CPUTimeSupported = true
