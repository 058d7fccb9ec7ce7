package sharding

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
)

var mpMeasure = flag.Bool("mp-measure", false, "measure the certificate on gptLayerStep")

func TestMPMeasure(t *testing.T) {
	if !*mpMeasure {
		t.Skip("-mp-measure")
	}
	g := gptLayerStep(t)
	for _, sh := range [][2]int{{2, 2}, {2, 4}, {1, 4}, {4, 2}, {1, 8}} {
		c, lm := benchMesh(t, "dgx-a100", sh[0], sh[1])
		p, err := newPlanner(g, lm, Options{Cluster: c})
		require.NoError(t, err)
		m, _, err := p.energyModel()
		require.NoError(t, err)
		start := time.Now()
		res := solveMP(m, 2000, 2000)
		el := time.Since(start)
		t0 := time.Now()
		sol, err := ilp.Solve(context.Background(), p.prob, ilp.Options{})
		require.NoError(t, err)
		lp := time.Since(t0)
		fmt.Printf("%dx%d vars %d factors %d: closed %v iters %d ub %.12g lb %.12g gap %.3g rel %.3g  %v | lp %.12g %v\n",
			sh[0], sh[1], len(m.labels), len(m.factors), res.closed, res.iters, res.ub, res.lb, res.ub-res.lb, (res.ub-res.lb)/res.ub, el, sol.Objective, lp)
	}
}
