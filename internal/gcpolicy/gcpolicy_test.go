package gcpolicy

import (
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestForSearchSetsAndRestores(t *testing.T) {
	prev := debug.SetGCPercent(77)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	t.Setenv("GOGC", "") // restored after the test
	require.NoError(t, os.Unsetenv("GOGC"))
	restore := ForSearch()
	assert.Equal(t, SearchPercent, debug.SetGCPercent(SearchPercent), "ForSearch sets GOGC")
	restore()
	assert.Equal(t, 77, debug.SetGCPercent(77), "restore puts the old GOGC back")
}

func TestForSearchKeepsTheUsersGOGC(t *testing.T) {
	prev := debug.SetGCPercent(55)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	t.Setenv("GOGC", "55")
	restore := ForSearch()
	assert.Equal(t, 55, debug.SetGCPercent(55), "a GOGC from the environment stands")
	restore()
	assert.Equal(t, 55, debug.SetGCPercent(55))
}

func TestForSearchLimitsMemory(t *testing.T) {
	prev := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	t.Setenv("GOMEMLIMIT", "")
	require.NoError(t, os.Unsetenv("GOMEMLIMIT"))
	restore := ForSearch()
	assert.Equal(t, int64(SearchMemoryLimit), debug.SetMemoryLimit(-1), "ForSearch sets the soft limit")
	restore()
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "restore puts the old limit back")
}

func TestForSearchKeepsALowerOrTheUsersLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(1 << 30)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	t.Setenv("GOMEMLIMIT", "")
	require.NoError(t, os.Unsetenv("GOMEMLIMIT"))
	restore := ForSearch()
	assert.Equal(t, int64(1<<30), debug.SetMemoryLimit(-1), "a lower limit already in force stands")
	restore()

	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "8GiB")
	restore = ForSearch()
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "a GOMEMLIMIT from the environment stands")
	restore()
}
