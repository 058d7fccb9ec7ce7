package zoo

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
)

// modelsDir is testdata/models at the repository root: the zoo's presets as .ir, read by
// the other packages' tests and by `make demo`.
const modelsDir = "../../testdata/models"

func printGraph(t *testing.T, g *ir.Graph) []byte {
	var buf bytes.Buffer
	require.NoError(t, ir.Print(&buf, g))
	return buf.Bytes()
}

// firstDiff describes the first line where two texts differ, so a failure on a 2000-line
// model says where rather than dumping both.
func firstDiff(want, got []byte) string {
	wl, gl := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + strconv.Itoa(i+1) + ":\n  file: " + w + "\n  now:  " + g
		}
	}
	return "no difference"
}

// TestModelsGolden checks that testdata/models/PRESET.ir is what the zoo prints now for
// every preset, and that the parser reads each file back to a graph that prints to the
// same bytes (the builder and the parser make the same IR). UPDATE_GOLDEN=1 rewrites the
// files. A .ir file there that no preset makes is stale and fails the test.
func TestModelsGolden(t *testing.T) {
	update := os.Getenv("UPDATE_GOLDEN") == "1"
	if update {
		require.NoError(t, os.MkdirAll(modelsDir, 0o755))
	}
	known := map[string]bool{}
	for _, p := range Presets() {
		known[p.Name+".ir"] = true
		t.Run(p.Name, func(t *testing.T) {
			m, err := NewPreset(p.Name)
			require.NoError(t, err)
			g, err := m.Build()
			require.NoError(t, err)
			now := printGraph(t, g)
			path := filepath.Join(modelsDir, p.Name+".ir")
			if update {
				require.NoError(t, os.WriteFile(path, now, 0o644))
			}
			file, err := os.ReadFile(path)
			require.NoError(t, err, "run UPDATE_GOLDEN=1 go test ./frontend/zoo -run TestModelsGolden")
			require.True(t, bytes.Equal(file, now), "%s is stale (UPDATE_GOLDEN=1 rewrites it), first difference at %s", path, firstDiff(file, now))

			parsed, err := frontend.Parse(path, file)
			require.NoError(t, err)
			back := printGraph(t, parsed)
			require.True(t, bytes.Equal(file, back), "%s does not print back identically after parsing, first difference at %s", path, firstDiff(file, back))
		})
	}
	entries, err := os.ReadDir(modelsDir)
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".ir") && !known[e.Name()] {
			t.Errorf("%s/%s is made by no preset: delete it or add the preset", modelsDir, e.Name())
		}
	}
}
