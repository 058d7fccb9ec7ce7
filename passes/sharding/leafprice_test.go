package sharding

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
)

// TestLeafValuesCountsWhatReplicatingCannotFree: FreeDual.LeafValues counts an input read
// by two ops of other groups (priced once per consumer) only where it cannot be laid out
// replicated at its group's least own cost: alone in its group it can (0), as the leader
// of a follower (neg(x) merged into x's group) it cannot (1), and under MemoryBound's
// once-per-layout pricing nothing is priced per consumer (0). rangeDual voids a bound
// where it is not 0 (docs/DECISIONS.md, "Round ten, rangedual").
func TestLeafValuesCountsWhatReplicatingCannotFree(t *testing.T) {
	const n = 64
	graph := func(follower bool) *ir.Graph {
		b := newGB(t, "leaf")
		x := b.input("x", n, n)
		h1 := b.op(ir.OpMatMul, "h1", nil, x, b.param("w1", n, n))
		h2 := b.op(ir.OpMatMul, "h2", nil, x, b.param("w2", n, n))
		out := b.op(ir.OpAdd, "out", nil, h1, h2)
		if follower {
			out = b.op(ir.OpAdd, "out2", nil, out, b.op(ir.OpNeg, "nx", nil, x))
		}
		b.g.AddOutput(out, ir.Pos{})
		return b.g
	}
	lm := uniform(t, 2, 2)
	opts := Options{DeviceFLOPS: 1e9}
	for _, tc := range []struct {
		follower bool
		want     int
	}{{false, 0}, {true, 1}} {
		g := graph(tc.follower)
		d, err := FreeBound(context.Background(), g, lm, opts)
		require.NoError(t, err)
		assert.Equal(t, tc.want, d.LeafValues, "follower %v", tc.follower)
		p, err := newPlannerContext(context.Background(), g, lm, opts)
		require.NoError(t, err)
		x := lookup(t, g, "x")
		assert.Equal(t, 1+btoi(tc.follower), len(p.groups[p.groupOf[x]].members), "follower %v: x's group", tc.follower)
		opts.sharedCells = maxSharedCells
		q, err := newPlannerContext(context.Background(), g, lm, opts)
		opts.sharedCells = 0
		require.NoError(t, err)
		assert.Zero(t, q.leavesPriced, "follower %v: priced once per layout", tc.follower)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
