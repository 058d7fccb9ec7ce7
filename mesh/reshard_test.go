package mesh

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The reference setting of the hand-checked tables: a 2×2 mesh with α = β = 1
// and a 4×4 tensor of 8-byte elements. A device holds 128 bytes replicated,
// 64 split on one axis, 32 split on both. So on one axis (n = 2):
// all-gather/reduce-scatter 1 + B/2, all-reduce 1 + B, all-to-all 1 + B/4;
// on both axes (n = 4): gather/scatter 1 + 3B/4, all-reduce 1 + 3B/2,
// all-to-all 1 + 3B/16.
func refMesh(t *testing.T) *LogicalMesh {
	t.Helper()
	m, err := NewUniformMesh(2, 2, 1, 1)
	require.NoError(t, err)
	return m
}

var refShape = []int{4, 4}

func reshard(t *testing.T, m *LogicalMesh, shape []int, from, to string) Reshard {
	t.Helper()
	r, err := ReshardCost(m, shape, 8, MustParseSpec(from), MustParseSpec(to))
	require.NoError(t, err, "%s → %s", from, to)
	return r
}

func TestReshardHandTable(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		time     float64
		why      string
	}{
		{"S0R", "S0R", 0, "identity"},
		{"RR", "S01R", 0, "slice"},
		{"RR", "S1S0", 0, "slice on both dims"},
		{"S0R", "S01R", 0, "S0 → S01 is a slice: each block of S01 lies in the device's S0 block"},
		{"S0R", "RR", 65, "all-gather axis 0, B=128: 1+64"},
		{"RS1", "RR", 65, "all-gather axis 1, B=128"},
		{"S01R", "RR", 97, "one all-gather over 4, B=128: 1+96 (two steps: 33+65=98)"},
		{"RS01", "RR", 97, "as S01R"},
		{"S0S1", "RR", 98, "all-gather axis 1, B=64: 33; then axis 0, B=128: 65"},
		{"S1S0", "RR", 98, "as S0S1"},
		{"S01R", "S0R", 33, "all-gather axis 1 (minor), B=64: 1+32"},
		{"S0R", "RS0", 33, "all-to-all axis 0, the group holds B=128: 1+32"},
		{"RS0", "S01R", 25, "slice to RS01 (32 B each), all-to-all over 4, B=128: 1+24"},
		{"S0R", "S1R", 65, "gather (65) then slice; via RS0 and S1S0 costs 33+0+33=66"},
		{"S1R", "S01R", 42, "slice to S1S0; all-to-all axis 1 to RS01, B=64: 17; all-to-all over 4 to S01R, B=128: 25"},
		{"S01R", "S1R", 75, "all-to-all over 4 to RS01 (25); axis 1 to S1S0, B=64 (17); gather axis 0, B=64 (33)"},
		{"S0S1", "S1S0", 59, "17 (to S01R) + 25 (to RS01) + 17 (to S1S0); a collective-permute is not modelled"},
		{"RR+P0", "RR", 129, "all-reduce axis 0, B=128: 1+128 (reduce-scatter + all-gather: 130)"},
		{"RR+P01", "RR", 193, "all-reduce over 4, B=128: 1+192"},
		{"RR+P01", "RR+P0", 129, "all-reduce axis 1 only, B=128: 1+128; a partial target is reachable"},
		{"RS1+P0", "RR", 130, "all-reduce axis 0, B=64: 65; all-gather axis 1, B=128: 65"},
		{"RR+P0", "S0R", 65, "reduce-scatter axis 0 onto dim 0, B=128: 1+64"},
		{"RR+P0", "S1R", 65, "slice S1 first (free), then all-reduce axis 0 on B=64: 1+64"},
		{"RR+P0", "S01R", 50, "slice RS1; reduce-scatter axis 0 onto dim 0, B=64: 33; all-to-all axis 1 to S01R, B=64: 17"},
		{"RR+P01", "S01R", 97, "one reduce-scatter over 4, B=128: 1+96"},
		{"RR+P01", "S0S1", 98, "reduce-scatter axis 0, B=128: 65; reduce-scatter axis 1, B=64: 33"},
		{"S0R+P1", "S01R", 33, "reduce-scatter axis 1 onto dim 0 (S0 → S01), B=64: 1+32"},
	} {
		r := reshard(t, refMesh(t), refShape, tc.from, tc.to)
		assert.InDelta(t, tc.time, r.Time, 1e-9, "%s → %s: %s; got %v", tc.from, tc.to, tc.why, r.Steps)
	}
}

func TestReshardStepsAndBytes(t *testing.T) {
	r := reshard(t, refMesh(t), refShape, "RR+P0", "S01R")
	want := []string{
		"slice axes 1 dim 1 B=0 -> RS1+P0",
		"reduce_scatter axes 0 dim 0 B=64 -> S0S1",
		"all_to_all axes 1 dim 1->0 B=64 -> S01R",
	}
	var got []string
	for _, s := range r.Steps {
		got = append(got, s.String())
	}
	assert.Equal(t, want, got)
	assert.InDelta(t, 0+32+16, r.Sent, 1e-9, "bytes sent per device: (n−1)/n·64 + (n−1)/n²·64")
}

// applyStep recomputes, independently of the search, what a step must do to
// a layout and the B it must be priced on.
func applyStep(t *testing.T, m *LogicalMesh, prev Spec, st Step) (Spec, float64) {
	t.Helper()
	next := prev.clone()
	local := func(s Spec) float64 {
		b, err := m.LocalBytes(refShape, 8, s)
		require.NoError(t, err)
		return float64(b)
	}
	switch st.Kind {
	case Slice:
		next.Dims[st.Dim] |= st.Axes
		return next, 0
	case AllGather:
		next.Dims[st.Dim] &^= st.Axes
		return next, local(next)
	case AllToAll:
		next.Dims[st.Dim] &^= st.Axes
		next.Dims[st.ToDim] |= st.Axes
		return next, local(prev) * float64(m.AxisSize(st.Axes))
	case AllReduce:
		next.Partial &^= st.Axes
		return next, local(prev)
	case ReduceScatter:
		next.Partial &^= st.Axes
		next.Dims[st.Dim] |= st.Axes
		return next, local(prev)
	}
	t.Fatalf("unknown step %v", st)
	return Spec{}, 0
}

// TestReshardAllPairs checks every (source, target) of a 2-D tensor on the
// 2×2 reference mesh: 16 sources (partials included) × 9 targets.
func TestReshardAllPairs(t *testing.T) {
	m := refMesh(t)
	sources, targets := validSpecs2D(true), validSpecs2D(false)
	cost := map[string]float64{}
	for _, from := range sources {
		for _, to := range targets {
			r, err := ReshardCost(m, refShape, 8, from, to)
			require.NoError(t, err, "%s → %s", from, to)
			cost[from.String()+">"+to.String()] = r.Time
			checkSteps(t, m, from, to, r)
		}
	}
	rr := "RR"
	for _, from := range sources {
		f := from.String()
		if from.Partial == AxesNone {
			assert.Zero(t, cost[f+">"+f], "identity %s", f)
		}
		for _, to := range targets {
			c := cost[f+">"+to.String()]
			if f == rr {
				assert.Zero(t, c, "RR → %s is a slice", to)
			}
			// Gathering to R and slicing reaches any target, so R is the most
			// expensive target of all.
			assert.LessOrEqual(t, c, cost[f+">"+rr]+1e-9, "%s → %s exceeds %s → RR", f, to, f)
			for _, mid := range targets {
				via := cost[f+">"+mid.String()] + cost[mid.String()+">"+to.String()]
				assert.LessOrEqual(t, c, via+1e-9, "triangle %s → %s → %s", f, mid, to)
			}
		}
	}
}

// checkSteps verifies that the steps chain from → to, that each does what
// its kind says on the right bytes, and that the totals add up.
func checkSteps(t *testing.T, m *LogicalMesh, from, to Spec, r Reshard) {
	t.Helper()
	cur, sum, sent := from, 0.0, 0.0
	for _, st := range r.Steps {
		next, B := applyStep(t, m, cur, st)
		require.True(t, next.Equal(st.After), "%s: %v gives %s", from, st, next)
		assert.InDelta(t, B, st.Bytes, 1e-9, "%s → %s: %v", from, to, st)
		assert.InDelta(t, m.Cost(st.Kind, st.Axes, B), st.Time, 1e-9)
		assert.InDelta(t, BytesSent(st.Kind, m.AxisSize(st.Axes), B), st.Sent, 1e-9)
		cur, sum, sent = next, sum+st.Time, sent+st.Sent
	}
	assert.True(t, cur.Equal(to), "%s → %s ends at %s", from, to, cur)
	assert.InDelta(t, sum, r.Time, 1e-9)
	assert.InDelta(t, sent, r.Sent, 1e-9)
}

// TestReshardMatchesBellmanFord cross-checks the Dijkstra search against a
// plain Bellman–Ford relaxation over the same moves, on a rank-3 tensor and
// a 2×4 mesh whose axes cost differently.
func TestReshardMatchesBellmanFord(t *testing.T) {
	m, err := NewUniformMesh(2, 4, 1, 1)
	require.NoError(t, err)
	m = m.WithAxisCost(0, 7, 0.3).WithAxisCost(1, 0.5, 0.01)
	shape := []int{8, 16, 24}
	g := newReshardGraph(m, shape, 4)
	specs := allSpecs(len(shape))
	for _, from := range specs {
		dist := bellmanFord(g, from, specs)
		for _, to := range specs {
			want, ok := dist[to.String()]
			r, err := ReshardCost(m, shape, 4, from, to)
			if !ok {
				assert.Error(t, err, "%s → %s", from, to)
				continue
			}
			require.NoError(t, err, "%s → %s", from, to)
			assert.InDelta(t, want, r.Time, 1e-9, "%s → %s", from, to)
		}
	}
}

// allSpecs lists every valid spec of a rank-r tensor, partials included.
func allSpecs(rank int) []Spec {
	var out []Spec
	for p0 := -2; p0 < rank; p0++ {
		for p1 := -2; p1 < rank; p1++ {
			s := Replicated(rank)
			for a, p := range []int{p0, p1} {
				switch {
				case p == -1:
					s.Partial |= 1 << a
				case p >= 0:
					s.Dims[p] |= 1 << a
				}
			}
			out = append(out, s)
		}
	}
	return out
}

func bellmanFord(g *reshardGraph, from Spec, specs []Spec) map[string]float64 {
	dist := map[string]float64{from.String(): 0}
	for range specs {
		for _, s := range specs {
			d, ok := dist[s.String()]
			if !ok {
				continue
			}
			for _, st := range g.moves(s) {
				k := st.After.String()
				if old, seen := dist[k]; !seen || d+st.Time < old {
					dist[k] = d + st.Time
				}
			}
		}
	}
	return dist
}

func TestReshardNotDivisible(t *testing.T) {
	m := refMesh(t)
	_, err := ReshardCost(m, []int{3, 4}, 8, MustParseSpec("S0R"), MustParseSpec("RR"))
	var nd *NotDivisibleError
	require.True(t, errors.As(err, &nd), "%v", err)
	assert.Equal(t, 0, nd.Dim)
	assert.Equal(t, Axis0, nd.Axes)

	_, err = ReshardCost(m, []int{4, 3}, 8, MustParseSpec("RR"), MustParseSpec("RS1"))
	assert.EqualError(t, err, "mesh: dim 1 of size 3 cannot be split on mesh axis 1 into 2 shards")

	// 4×2: RS01 would need dim 1 in 4 pieces, so the cheap route through it
	// (1+3/16·64 = 13) is closed; all-to-all axis 0 on B=64 (17) then slice.
	r := reshard(t, m, []int{4, 2}, "RS0", "S01R")
	assert.InDelta(t, 17.0, r.Time, 1e-9, fmt.Sprint(r.Steps))
}

func TestReshardErrors(t *testing.T) {
	m := refMesh(t)
	_, err := ReshardCost(m, refShape, 8, MustParseSpec("RR"), MustParseSpec("RR+P0"))
	assert.EqualError(t, err, "mesh: no collectives turn RR into RR+P0 (partial sums cannot be created)")
	_, err = ReshardCost(m, refShape, 0, MustParseSpec("RR"), MustParseSpec("RR"))
	assert.ErrorContains(t, err, "element size must be positive")
	_, err = ReshardCost(m, refShape, 8, MustParseSpec("RRR"), MustParseSpec("RR"))
	assert.ErrorContains(t, err, "has 3 dims")
}

func TestReshardSizeOneAxisIsFree(t *testing.T) {
	m, err := NewUniformMesh(1, 4, 1, 1)
	require.NoError(t, err)
	r := reshard(t, m, refShape, "S0R", "RR")
	assert.Zero(t, r.Time)
	assert.False(t, math.IsNaN(r.Sent))
}

// BenchmarkReshardCost times one search per rank on a 2×4 mesh, the call the
// intra-operator pass makes for every edge and pair of strategies.
func BenchmarkReshardCost(b *testing.B) {
	for _, rank := range []int{2, 3, 4} {
		b.Run(fmt.Sprintf("rank=%d", rank), func(b *testing.B) {
			m, err := NewUniformMesh(2, 4, 1e-5, 1e-10)
			require.NoError(b, err)
			shape := make([]int, rank)
			for i := range shape {
				shape[i] = 64
			}
			from, to := Replicated(rank), Replicated(rank)
			from.Dims[0], from.Partial = Axis1, Axis0
			to.Dims[rank-1] = AxesBoth
			for b.Loop() {
				if _, err := ReshardCost(m, shape, 4, from, to); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestReshardSourceEqualsReshardCost: from every layout of tensors of rank 1 to 4 (shapes
// some axes do not divide, so that some layouts are errors or closed as intermediates) on
// meshes of several shapes, a ReshardSource's To(to) returns for every target exactly
// what ReshardCost returns: the same steps, time and bytes, or the same error; and so does
// the source of a ReshardTensor, whose moves are listed once. Make search stop at the first
// target it finalizes (dst 0 for every source) and it fails; list a tensor's moves of the
// wrong layout (index+1) and it fails.
func TestReshardSourceEqualsReshardCost(t *testing.T) {
	for _, ms := range [][2]int{{2, 2}, {2, 4}, {1, 8}, {4, 2}} {
		m, err := NewUniformMesh(ms[0], ms[1], 1e-5, 1e-10)
		require.NoError(t, err)
		for _, shape := range [][]int{{8}, {4, 6}, {16, 2, 8}, {8, 4, 3, 16}} {
			specs := allSpecs(len(shape))
			tensor, err := NewReshardTensor(m, shape, 2)
			require.NoError(t, err)
			for i := range 2 * len(specs) {
				from := specs[i/2]
				src, srcErr := NewReshardSource(m, shape, 2, from)
				if i%2 == 1 {
					src, srcErr = tensor.Source(from)
				}
				for _, to := range specs {
					want, wantErr := ReshardCost(m, shape, 2, from, to)
					name := fmt.Sprintf("%v on %v: %s → %s", shape, ms, from, to)
					if srcErr != nil {
						require.Error(t, wantErr, name)
						require.Equal(t, wantErr.Error(), srcErr.Error(), name)
						continue
					}
					got, err := src.To(to)
					if wantErr != nil {
						require.Error(t, err, name)
						require.Equal(t, wantErr.Error(), err.Error(), name)
						continue
					}
					require.NoError(t, err, name)
					require.Equal(t, want, got, name)
				}
			}
		}
	}
	_, err := NewReshardSource(refMesh(t), refShape, 0, MustParseSpec("RR"))
	assert.ErrorContains(t, err, "element size must be positive")
	_, err = NewReshardTensor(refMesh(t), refShape, 0)
	assert.ErrorContains(t, err, "element size must be positive")
}

// BenchmarkReshardSource prices one source layout of a rank-3 tensor on a 2×4 mesh into
// every layout: by a ReshardCost search per target (cost), and by one ReshardSource and a
// lookup per target (source), as the sharding planner's memo now does:
//
//	go test ./mesh -run '^$' -bench ReshardSource
func BenchmarkReshardSource(b *testing.B) {
	m, err := NewUniformMesh(2, 4, 1e-5, 1e-10)
	require.NoError(b, err)
	shape := []int{64, 64, 64}
	from := Replicated(3)
	from.Dims[0], from.Partial = Axis1, Axis0
	var tos []Spec
	for _, s := range allSpecs(3) {
		if s.Partial == AxesNone {
			tos = append(tos, s)
		}
	}
	b.Run(fmt.Sprintf("cost/%d-targets", len(tos)), func(b *testing.B) {
		for b.Loop() {
			for _, to := range tos {
				if _, err := ReshardCost(m, shape, 4, from, to); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run(fmt.Sprintf("source/%d-targets", len(tos)), func(b *testing.B) {
		for b.Loop() {
			src, err := NewReshardSource(m, shape, 4, from)
			if err != nil {
				b.Fatal(err)
			}
			for _, to := range tos {
				if _, err := src.To(to); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
