package mesh

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNotationTable writes specs in the three notations; each row is read by a person
// who knows the other framework (a (2, 4) mesh: 'x' has 2 devices, 'y' has 4).
func TestNotationTable(t *testing.T) {
	for _, c := range []struct{ alpa, jax, dtensor string }{
		{"RR", "P(None, None)", "[Replicate(), Replicate()]"},
		{"S0R", "P('x', None)", "[Shard(0), Replicate()]"},
		{"RS1", "P(None, 'y')", "[Replicate(), Shard(1)]"},
		{"S1R", "P('y', None)", "[Replicate(), Shard(0)]"},
		{"S0S1", "P('x', 'y')", "[Shard(0), Shard(1)]"},
		{"S1S0", "P('y', 'x')", "[Shard(1), Shard(0)]"},
		{"S01R", "P(('x', 'y'), None)", "[Shard(0), Shard(0)]"},
		{"RRS01", "P(None, None, ('x', 'y'))", "[Shard(2), Shard(2)]"},
		{"RS0+P1", "P(None, 'x', unreduced={'y'})", "[Shard(1), Partial()]"},
		{"RR+P01", "P(None, None, unreduced={'x', 'y'})", "[Partial(), Partial()]"},
		{"S1+P0", "P('y', unreduced={'x'})", "[Partial(), Shard(0)]"},
		{"", "P()", "[Replicate(), Replicate()]"},
		{"+P1", "P(unreduced={'y'})", "[Replicate(), Partial()]"},
	} {
		s := MustParseSpec(c.alpa)
		assert.Equal(t, c.alpa, Alpa.Format(s), "alpa")
		assert.Equal(t, c.jax, JAX.Format(s), "jax of %s", c.alpa)
		assert.Equal(t, c.dtensor, DTensor.Format(s), "dtensor of %s", c.alpa)

		// Back from placements: the same spec, given the rank.
		ps, err := ParsePlacements(c.dtensor)
		require.NoError(t, err)
		back, err := FromPlacements(ps, len(s.Dims))
		require.NoError(t, err)
		assert.True(t, back.Equal(s), "%s -> %s -> %s", c.alpa, c.dtensor, back)
	}
}

// TestPlacementsRoundTrip converts every valid spec of rank up to 3 to placements and
// back, and every placement list of rank up to 3 to a spec and back.
func TestPlacementsRoundTrip(t *testing.T) {
	n := 0
	for rank := range 4 {
		for _, s := range specsByDims(rank) {
			ps := s.Placements()
			back, err := FromPlacements(ps[:], rank)
			require.NoError(t, err)
			require.True(t, back.Equal(s), "%s -> %v -> %s", s, s.Placements(), back)
			n++
		}
		kinds := []Placement{{Kind: Replicate}, {Kind: Partial}}
		for d := range rank {
			kinds = append(kinds, Placement{Kind: Shard, Dim: d})
		}
		for _, p0 := range kinds {
			for _, p1 := range kinds {
				s, err := FromPlacements([]Placement{p0, p1}, rank)
				require.NoError(t, err)
				require.NoError(t, s.Validate())
				assert.Equal(t, [2]Placement{p0, p1}, s.Placements(), "%v -> %s", []Placement{p0, p1}, s)
			}
		}
	}
	assert.Equal(t, 4+9+16+25, n, "a rank-r tensor has (r+2)² specs on a 2-D mesh")
}

// specsByDims lists every valid spec of a rank-r tensor, dim by dim (reshard_test's
// allSpecs enumerates them axis by axis, as placements do).
func specsByDims(rank int) []Spec {
	var out []Spec
	var rec func(d int, dims []AxisSet, used AxisSet)
	rec = func(d int, dims []AxisSet, used AxisSet) {
		if d == rank {
			for p := AxesNone; p <= AxesBoth; p++ {
				if p&used == 0 {
					out = append(out, Spec{Dims: append([]AxisSet(nil), dims...), Partial: p})
				}
			}
			return
		}
		for a := AxesNone; a <= AxesBoth; a++ {
			if a&used == 0 {
				rec(d+1, append(dims, a), used|a)
			}
		}
	}
	rec(0, nil, AxesNone)
	return out
}

func TestNotationErrors(t *testing.T) {
	_, err := ParseNotation("torch")
	assert.EqualError(t, err, `notation "torch": expected one of alpa, jax, dtensor`)
	n, err := ParseNotation("DTensor")
	require.NoError(t, err)
	assert.Equal(t, DTensor, n)

	_, err = FromPlacements([]Placement{{Kind: Shard, Dim: 2}, {}}, 2)
	assert.ErrorContains(t, err, "a rank-2 tensor has dims 0 to 1")
	_, err = FromPlacements([]Placement{{}}, 2)
	assert.ErrorContains(t, err, "1 placements, expected 2")
	for _, bad := range []string{"Shard(0), Replicate()", "[Shard(x), Replicate()]", "[Shard(0)x, Replicate()]", "[Sharded(0), Replicate()]"} {
		_, err := ParsePlacements(bad)
		assert.Error(t, err, bad)
	}
}
