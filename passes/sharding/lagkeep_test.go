package sharding

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemoryBoundUntilGoesOn: a search stopped at a low target and asked again for a
// higher one, and again by steps (from its Mu, the options carrying a CandidateMemo), goes
// on with the kept search, paused solves included: the same bound, multiplier and sweeps
// as one search asked once for the last target (such bounds TestMemoryBoundIsLower holds under lp_solve's plans). A call for
// another budget on the same graph and mesh is not answered by the kept search: it equals
// a search begun anew. Mutations caught: a kept search matched by its graph alone; a kept
// search begun anew from its multiplier; a paused solve begun anew at its multiplier.
func TestMemoryBoundUntilGoesOn(t *testing.T) {
	_, lm := benchMesh(t, "dgx-a100", 2, 2)
	g := tinyStep(t, "mlp-tiny")
	base, free, least := boundBudgets(t, g, lm)
	unbound, err := MemoryBound(context.Background(), g, lm, base, 400)
	require.NoError(t, err)
	freeSweeps := unbound.Sweeps
	wentOn := 0
	for _, f := range []float64{0.6, 0.3, 0.1} {
		opts := base
		opts.MemoryBudget = least + int64(f*float64(free.PeakMemory-least))
		full, err := MemoryBound(context.Background(), g, lm, opts, 400)
		require.NoError(t, err)
		if full.Under <= full.Bound {
			continue // the memory did not bind this bound: nothing to stop
		}
		low := full.Bound + 0.3*(full.Under-full.Bound)
		high := full.Bound + 0.9*(full.Under-full.Bound)
		reach := func(target float64) func(MemoryDual) bool {
			return func(d MemoryDual) bool { return d.Under >= target }
		}
		once, err := MemoryBoundUntil(context.Background(), g, lm, opts, 400, 0, reach(high))
		require.NoError(t, err)

		kept := opts
		kept.Candidates = &CandidateMemo{}
		first, err := MemoryBoundUntil(context.Background(), g, lm, kept, 400, 0, reach(low))
		require.NoError(t, err)
		if first.Under >= high {
			continue // the first stop already reached the second target
		}
		require.Len(t, kept.Candidates.lags.ents, 1, "a search stopped at its target is kept")

		// Another budget on the same graph and mesh, from the kept search's multiplier:
		// a search of its own, not the kept one.
		other := kept
		other.MemoryBudget = least + int64((f+0.05)*float64(free.PeakMemory-least))
		otherOpts := opts
		otherOpts.MemoryBudget = other.MemoryBudget
		fresh, err := MemoryBoundUntil(context.Background(), g, lm, otherOpts, 400, first.Mu, nil)
		require.NoError(t, err)
		got, err := MemoryBoundUntil(context.Background(), g, lm, other, 400, first.Mu, nil)
		require.NoError(t, err)
		assert.Equal(t, fresh, got, "at %d bytes: another budget's search", other.MemoryBudget)
		require.Len(t, kept.Candidates.lags.ents, 1, "the stopped search is still kept")

		// Asked again and again, the target rising by steps to high (so that some pause falls
		// inside a solve), it goes on to where one search asked once for high ends. Each call
		// counts the free solve's sweeps once: the rest are the one call's.
		last, sweeps := first, first.Sweeps
		for k := 7; k <= 18; k++ {
			last, err = MemoryBoundUntil(context.Background(), g, lm, kept, 400, last.Mu, reach(full.Bound+float64(k)*0.05*(full.Under-full.Bound)))
			require.NoError(t, err)
			sweeps += last.Sweeps - freeSweeps
		}
		assert.Equal(t, once.Under, last.Under, "at %d bytes: the bound", opts.MemoryBudget)
		assert.Equal(t, once.Mu, last.Mu, "at %d bytes: the multiplier", opts.MemoryBudget)
		assert.Equal(t, once.Fits, last.Fits)
		assert.Equal(t, once.Sweeps, sweeps, "at %d bytes: the sweeps", opts.MemoryBudget)
		wentOn++
		t.Logf("at %d bytes: %.6g after %d sweeps, then %.6g after %d in all (once: %.6g after %d)", opts.MemoryBudget,
			first.Under, first.Sweeps, last.Under, sweeps, once.Under, once.Sweeps)
	}
	assert.Positive(t, wentOn, "some search went on")
}
