package plan

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoSearchDependency holds the data packages and their readers to their docs: plan,
// program, render and the runtime import neither the search (ilp, passes/sharding, dp, the
// root package) nor any autopar package with cgo, so they build with CGO_ENABLED=0 (the
// Makefile's nocgo target builds them so).
func TestNoSearchDependency(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not installed")
	}
	const mod = "github.com/autopar/autopar"
	forbidden := []string{mod, mod + "/ilp", mod + "/passes/sharding", mod + "/dp"}
	for _, pkgs := range []string{".", "../program", "../render/...", "../runtime/..."} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{len .CgoFiles}}", pkgs).Output()
		require.NoError(t, err, "go list -deps %s", pkgs)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		require.Greater(t, len(lines), 1, "go list -deps %s listed nothing", pkgs)
		for _, line := range lines {
			pkg, cgo, _ := strings.Cut(line, " ")
			assert.NotContains(t, forbidden, pkg, "%s imports %s", pkgs, pkg)
			if strings.HasPrefix(pkg, mod) {
				assert.Equal(t, "0", cgo, "%s imports %s, which needs cgo", pkgs, pkg)
			}
		}
	}
}
