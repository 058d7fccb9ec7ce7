package autopar

import (
	"context"
	"testing"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
)

// testOracle builds the oracle compileWith would for b micro-batches and the given layer
// count (0: automatic).
func testOracle(t testing.TB, g *ir.Graph, c *mesh.Cluster, b, layers int) (*oracle, dp.Cluster) {
	t.Helper()
	batch, err := passes.BatchSize(g)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := passes.Rebatch(g, batch/b)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{}.withDefaults()
	step, err := passes.TrainingStep(mb, opts.Optimizer)
	if err != nil {
		t.Fatal(err)
	}
	if layers == 0 {
		layers = DefaultLayers(step, c.Devices())
	}
	lay, err := passes.ClusterLayers(step, passes.ClusterOptions{Layers: layers, ReaderParts: c.Hosts > 1})
	if err != nil {
		t.Fatal(err)
	}
	dc := dp.ClusterOf(c)
	o := newOracle(context.Background(), step, lay, c, opts.ILPTimeLimit, c.DeviceMemoryBytes, nil)
	o.canonical = true
	return o, dc
}
