package render

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/plan"
)

// planCase is a small plan compiled in the test, so the goldens follow the compiler.
type planCase struct {
	name, model, cluster string
	opts                 autopar.Options
}

var planCases = []planCase{
	{"mlp-cpu2", "mlp-tiny", "cpu:2", autopar.Options{Microbatches: 2, Layers: 2}},
	{"mlp-cpu4-pp", "mlp-tiny", "cpu:4", autopar.Options{Microbatches: 4, Layers: 4}},
	{"mlp-cpu4-gpipe", "mlp-tiny", "cpu:4", autopar.Options{Microbatches: 4, Layers: 4, Schedule: "gpipe",
		Manual: &autopar.Manual{TP: 2, PP: 2, DP: 1}}},
}

// compiled holds each case's plan.json, so that a case compiles once per test binary.
var compiled sync.Map

// compilePlan returns a fresh copy of the case's plan (tests may break it), read back from
// the plan.json the compiler wrote.
func compilePlan(t testing.TB, c planCase) *plan.Plan {
	t.Helper()
	data, ok := compiled.Load(c.name)
	if !ok {
		var buf bytes.Buffer
		require.NoError(t, compileFresh(t, c).WriteJSON(&buf))
		data, _ = compiled.LoadOrStore(c.name, buf.Bytes())
	}
	p, err := plan.ReadPlan(bytes.NewReader(data.([]byte)))
	require.NoError(t, err)
	return p
}

// compileFresh compiles the case's plan.
func compileFresh(t testing.TB, c planCase) *plan.Plan {
	t.Helper()
	g, err := frontend.ParseFile(filepath.Join("..", "testdata", "models", c.model+".ir"))
	require.NoError(t, err)
	cl, err := mesh.ParseCluster(c.cluster)
	require.NoError(t, err)
	p, err := autopar.Compile(context.Background(), g, cl, c.opts)
	require.NoError(t, err)
	return &p.Plan
}
