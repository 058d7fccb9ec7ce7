// Package golden holds the one golden-file check of autopar's tests: printed IR, plans,
// programs, pictures and CLI output are compared with files under the package's testdata/,
// and UPDATE_GOLDEN=1 rewrites those files instead, to be read as a diff in review.
package golden

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Update reports whether this run rewrites golden files (UPDATE_GOLDEN is set).
func Update() bool { return os.Getenv("UPDATE_GOLDEN") != "" }

// Check compares got with testdata/name, or writes got there when [Update] holds. A missing
// or stale file fails t with the command that rewrites it.
func Check(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if Update() {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "%s is missing: run UPDATE_GOLDEN=1 go test -run '%s' in this package", path, t.Name())
	assert.Equal(t, string(want), got, "%s is stale: run UPDATE_GOLDEN=1 go test -run '%s' in this package and read the diff", path, t.Name())
}
