package gcpolicy

import (
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
