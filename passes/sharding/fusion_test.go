package sharding

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// chainGraph: c = exp(neg(x) + y), x and y inputs of n×m f32, c the output; with
// readTwice, a second reader (tanh) of the sum and an output of it.
func chainGraph(t *testing.T, n, m int, readTwice bool) (*ir.Graph, [3]ir.ValueID) {
	b := newGB(t, "chain")
	x := b.input("x", n, m)
	y := b.input("y", n, m)
	a := b.op(ir.OpNeg, "a", nil, x)
	s := b.op(ir.OpAdd, "s", nil, a, y)
	c := b.op(ir.OpExp, "c", nil, s)
	b.g.AddOutput(c, ir.Pos{})
	if readTwice {
		b.g.AddOutput(b.op(ir.OpTanh, "u", nil, s), ir.Pos{})
	}
	return b.g, [3]ir.ValueID{a, s, c}
}

func oneDevice(t *testing.T, cluster string) (*mesh.Cluster, *mesh.LogicalMesh) {
	c, err := mesh.ParseCluster(cluster)
	require.NoError(t, err)
	lm, err := mesh.NewLogicalMesh(c, mesh.Submesh{Hosts: 1, Devices: 1}, 1, 1)
	require.NoError(t, err)
	return c, lm
}

// TestFusedChainByHand: on dgx-a100 (FuseElementwise) the chain neg → add → exp is one
// kernel: x and y are read once, c written once, the intermediates never touch memory, and
// one 4 µs overhead is paid. By hand, with N = 1024·1024 elements of 4 bytes, HBM at
// 2.039 TB/s and f32 vector work at 19.5 TFLOP/s × 0.6:
//
//	neg: max(N/11.7e12, 4N/2.039e12) = 2.057 µs (reads x)
//	add: max(N/11.7e12, 4N/2.039e12) = 2.057 µs (reads y)
//	exp: max(4N/11.7e12, 4N/2.039e12) + 4 µs = 6.057 µs (writes c)
//
// 10.17 µs in all, where unfused each op reads and writes its operands and result and
// pays its own overhead: (8N + 12N + 8N)/2.039e12 + 12 µs = 26.40 µs.
func TestFusedChainByHand(t *testing.T) {
	const n, m = 1024, 1024
	N := float64(n * m)
	g, ids := chainGraph(t, n, m, false)
	c, lm := oneDevice(t, "dgx-a100")
	require.True(t, c.FuseElementwise)
	bw, rate, o := 2.039e12, 19.5e12*0.6, 4e-6
	mem := 4 * N / bw
	want := []float64{mem, mem, max(4*N/rate, mem) + o}
	cands, err := CandidatesWith(g, lm, Options{Cluster: c})
	require.NoError(t, err)
	total := 0.0
	for i, id := range ids {
		require.Len(t, cands[id], 1)
		assert.InEpsilon(t, want[i], cands[id][0].Compute, 1e-12, "%s", g.Value(id).Name)
		total += cands[id][0].Compute
	}
	assert.InDelta(t, 10.17e-6, total, 0.01e-6)
	res, err := Solve(context.Background(), g, lm, Options{Cluster: c})
	require.NoError(t, err)
	assert.InEpsilon(t, total, res.Cost.Total, 1e-12)

	// The same cluster without fusion: every op is its own kernel.
	c.FuseElementwise = false
	cands, err = CandidatesWith(g, lm, Options{Cluster: c})
	require.NoError(t, err)
	unfused := 0.0
	for i, id := range ids {
		bytes := []float64{8 * N, 12 * N, 8 * N}[i]
		assert.InEpsilon(t, bytes/bw+o, cands[id][0].Compute, 1e-12, "%s", g.Value(id).Name)
		unfused += cands[id][0].Compute
	}
	assert.InDelta(t, 26.40e-6, unfused, 0.01e-6)
}

// TestFusionRuleEdges: what breaks a chain. A value read by two ops is written (and its
// readers read it); NoMerge and Force keep every op its own kernel, since the ILP may then
// put a resharding between them; the cpu preset never fuses.
func TestFusionRuleEdges(t *testing.T) {
	const n, m = 64, 32
	c, _ := oneDevice(t, "dgx-a100")
	cm, err := Options{Cluster: c}.costModel()
	require.NoError(t, err)

	g, ids := chainGraph(t, n, m, true)
	f := fusionOf(g, Options{Cluster: c}, cm)
	assert.True(t, f.fusedWrite(ids[0]), "neg, read by add alone, which follows it")
	assert.False(t, f.fusedWrite(ids[1]), "add, read by exp and tanh")
	assert.False(t, f.fusedWrite(ids[2]), "exp, a graph output")

	g, ids = chainGraph(t, n, m, false)
	assert.True(t, fusionOf(g, Options{Cluster: c}, cm).fusedWrite(ids[1]))
	assert.Nil(t, fusionOf(g, Options{Cluster: c, NoMerge: true}, cm))
	f = fusionOf(g, Options{Cluster: c, Force: map[ir.ValueID]int{ids[2]: 0}}, cm)
	assert.True(t, f.fusedWrite(ids[0]))
	assert.False(t, f.fusedWrite(ids[1]), "its reader exp is forced")

	cpu, _ := oneDevice(t, "cpu")
	require.False(t, cpu.FuseElementwise)
	cmc, err := Options{Cluster: cpu}.costModel()
	require.NoError(t, err)
	assert.Nil(t, fusionOf(g, Options{Cluster: cpu}, cmc))
}

// TestFusionLowersGPTStep: a GPT training step has fusable chains, and on one dgx-a100
// device fusion lowers its solved Total. (TestKernelBounds checks every strategy's fused
// price against the kernel bound on GPU meshes of 1, 2 and 4 devices.)
func TestFusionLowersGPTStep(t *testing.T) {
	g := gptStep(t, 1, 64, 4, 8, 96, 4)
	c, lm := oneDevice(t, "dgx-a100")
	fused, err := Solve(context.Background(), g, lm, Options{Cluster: c})
	require.NoError(t, err)
	c.FuseElementwise = false
	plain, err := Solve(context.Background(), g, lm, Options{Cluster: c})
	require.NoError(t, err)
	assert.Less(t, fused.Cost.Total, plain.Cost.Total)
	cm, _ := Options{Cluster: c}.costModel()
	c.FuseElementwise = true
	cm.cluster = c
	f := fusionOf(g, Options{Cluster: c}, cm)
	k := 0
	for id := range g.Values {
		if f.fusedWrite(ir.ValueID(id)) {
			k++
		}
	}
	assert.Positive(t, k, "a GPT step has fusable elementwise chains")
}
