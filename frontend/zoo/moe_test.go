package zoo

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/runtime/interp"
)

// refCombine is GShard's top-2 gating written as plain loops, the reference the graph's
// einsum formulation is checked against: gates [G,S,E] in, combine [G,S,E,C] out.
func refCombine(gates []float64, G, S, E, C int) []float64 {
	out := make([]float64, G*S*E*C)
	argmax := func(row []float64, skip int) int {
		best := -1
		for e, p := range row {
			if e != skip && (best < 0 || p > row[best]) {
				best = e
			}
		}
		return best
	}
	for g := 0; g < G; g++ {
		row := func(s int) []float64 { return gates[(g*S+s)*E : (g*S+s+1)*E] }
		e1, e2, pos1, pos2 := make([]int, S), make([]int, S), make([]int, S), make([]int, S)
		count := make([]int, E)
		for s := 0; s < S; s++ {
			e1[s] = argmax(row(s), -1)
			pos1[s] = count[e1[s]]
			count[e1[s]]++
		}
		for e := range count {
			count[e] = min(count[e], C) // top-2 assignments queue behind the kept top-1 ones
		}
		for s := 0; s < S; s++ {
			e2[s] = argmax(row(s), e1[s])
			pos2[s] = count[e2[s]]
			count[e2[s]]++
		}
		for s := 0; s < S; s++ {
			var g1, g2 float64
			if pos1[s] < C {
				g1 = row(s)[e1[s]]
			}
			if pos2[s] < C {
				g2 = row(s)[e2[s]]
			}
			denom := g1 + g2
			if denom == 0 {
				denom = 1
			}
			if g1 > 0 {
				out[((g*S+s)*E+e1[s])*C+pos1[s]] += g1 / denom
			}
			if g2 > 0 {
				out[((g*S+s)*E+e2[s])*C+pos2[s]] += g2 / denom
			}
		}
	}
	return out
}

// TestMoERouting runs the tiny MoE on the interpreter and compares its combine and
// dispatch tensors with the loop reference, with ample capacity and with capacity so small
// that most assignments are dropped.
func TestMoERouting(t *testing.T) {
	for _, capacity := range []float64{1, 0.25} {
		m := NewMoE()
		m.Capacity = capacity
		g, err := m.Build()
		require.NoError(t, err)
		feeds := interp.InitParams(g, 3)
		inputs, err := interp.GenerateInputs(g, 4)
		require.NoError(t, err)
		for k, v := range inputs {
			feeds[k] = v
		}
		res, err := interp.RunWith(context.Background(), g, feeds, interp.Options{KeepAll: true})
		require.NoError(t, err)
		value := func(name string) []float64 {
			id, ok := g.Lookup(name)
			require.True(t, ok, name)
			return res.Values[id].Float64s()
		}
		G, S, E, C := m.Batch*m.Seq/m.Group, m.Group, m.Experts, m.capacitySlots()
		want := refCombine(value("l1.moe.gates"), G, S, E, C)
		combine, dispatch := value("l1.moe.combine"), value("l1.moe.dispatch")
		require.Len(t, combine, len(want))
		kept, dropped := 0, 0
		for i := range want {
			assert.InDelta(t, want[i], combine[i], 1e-5, "capacity %g: combine[%d]", capacity, i)
			wantDispatch := 0.0
			if want[i] > 0 {
				wantDispatch = 1
				kept++
			}
			assert.Equal(t, wantDispatch, dispatch[i], "capacity %g: dispatch[%d]", capacity, i)
		}
		dropped = 2*G*S - kept
		t.Logf("capacity %g (C=%d): %d assignments kept, %d dropped", capacity, C, kept, dropped)
		if capacity < 1 {
			assert.Positive(t, dropped, "a small capacity must drop assignments")
			assert.LessOrEqual(t, kept, G*E*C)
		}
	}
}

// TestMoEGroupsFollowBatch checks that the token groups are formed so that the group dim
// shares the batch dim's label in the reshapes' dims signatures: then the sharding pass
// can split groups (and the whole gating and dispatch) exactly as it splits the batch. A
// single [B,T,H] -> [G,S,H] reshape would leave G a fixed label, unshardable.
func TestMoEGroupsFollowBatch(t *testing.T) {
	for _, preset := range []string{"moe-tiny", "moe-380m"} {
		m, err := NewPreset(preset)
		require.NoError(t, err)
		g, err := m.Build()
		require.NoError(t, err)
		for _, name := range []string{"l1.moe.groups.split", "l1.moe.groups", "l1.moe.out.split", "l1.moe.out"} {
			id, ok := g.Lookup(name)
			require.True(t, ok, "%s: %s", preset, name)
			d := g.Dims(id)
			l := d.Result[0]
			assert.Equal(t, l, d.Operands[0][0], "%s: %s must map dim 0 to dim 0 (%s)", preset, name, d)
			assert.False(t, d.Fixed[l], "%s: %s fixes the group dim (%s)", preset, name, d)
		}
	}
}
