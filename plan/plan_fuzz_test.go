package plan

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzReadPlan feeds ReadPlan hand-edited plans: it must never panic, and a plan it
// accepts must lower (Programs), give its memory breakdown (explain --memory), and write
// back a plan.json that reads again to the same bytes. The seeds are the plans in
// ../testdata/plans: a real one and its refused edits.
func FuzzReadPlan(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "plans", "*.json"))
	require.NoError(f, err)
	require.NotEmpty(f, files)
	for _, path := range files {
		data, err := os.ReadFile(path)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ReadPlan(bytes.NewReader(data))
		if err != nil {
			return
		}
		_, err = p.Programs()
		require.NoError(t, err, "ReadPlan accepted a plan that does not lower")
		p.MemoryBreakdown()
		var out bytes.Buffer
		require.NoError(t, p.WriteJSON(&out))
		q, err := ReadPlan(bytes.NewReader(out.Bytes()))
		require.NoError(t, err, "ReadPlan refuses the plan.json it wrote back")
		var again bytes.Buffer
		require.NoError(t, q.WriteJSON(&again))
		require.Equal(t, out.String(), again.String())
	})
}
