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

// TestFusionRuleEdges: what makes and breaks a kernel. A value read by two ops of the kernel
// stays inside it (multi-output: only the kernel's results read outside are written);
// NoMerge keeps every op its own kernel, and a forced op starts a group of its own, so the
// ILP may put a resharding between it and its operand; the cpu preset never fuses.
func TestFusionRuleEdges(t *testing.T) {
	const n, m = 64, 32
	c, _ := oneDevice(t, "dgx-a100")
	cm, err := Options{Cluster: c}.costModel()
	require.NoError(t, err)

	g, ids := chainGraph(t, n, m, true)
	f := fusionOf(g, Options{Cluster: c}, cm)
	assert.False(t, f.writes(ids[0]), "neg, read by add alone")
	assert.False(t, f.writes(ids[1]), "add, read by exp and tanh, both in its kernel")
	assert.True(t, f.writes(ids[2]), "exp, a graph output")
	assert.Equal(t, f.kernel[ids[0]], f.kernel[lookup(t, g, "u")], "tanh, a sibling reader")
	assert.True(t, f.launches(lookup(t, g, "u")) && !f.launches(ids[2]), "one launch, the last op's")

	g, ids = chainGraph(t, n, m, false)
	assert.False(t, fusionOf(g, Options{Cluster: c}, cm).writes(ids[1]))
	assert.Nil(t, fusionOf(g, Options{Cluster: c, NoMerge: true}, cm))
	f = fusionOf(g, Options{Cluster: c, Force: map[ir.ValueID]int{ids[2]: 0}}, cm)
	assert.False(t, f.writes(ids[0]))
	assert.True(t, f.writes(ids[1]), "its reader exp is forced")

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
	for _, name := range []string{"d.l0.attn.probs.dyy", "d.l0.attn.probs.dot", "d.l0.attn.probs.dotb", "d.l0.attn.scaled",
		"d.l0.ln2.layer_norm.xc2", "d.l0.ln2.layer_norm.m1b", "d.l0.mlp.gelu.pdf"} {
		assert.False(t, f.writes(lookup(t, g, name)), "%s stays in its kernel", name)
	}
}

// kernelBytes is what one device reads and writes in all under f (nil: no fusion) on one
// device: the graph's full tensors (a broadcast read as its source), leaves neither read
// nor written by themselves.
func kernelBytes(g *ir.Graph, f *fusion) int64 {
	var sum int64
	for id := range g.Values {
		v := &g.Values[id]
		if v.Op.Def().Category == ir.CatLeaf {
			continue
		}
		if f.writes(ir.ValueID(id)) {
			sum += v.Type.Bytes()
		}
		for i, a := range v.Args {
			if f.reads(ir.ValueID(id), i) {
				sum += int64(float64(g.Value(a).Type.Bytes()) * f.readScale(ir.ValueID(id), i))
			}
		}
	}
	return sum
}

// fusionOn is the dgx-a100 cluster's kernels of g (epilogues as asked).
func fusionOn(t *testing.T, g *ir.Graph, epilogue bool) *fusion {
	c, _ := oneDevice(t, "dgx-a100")
	c.FuseEpilogue = epilogue
	cm, err := Options{Cluster: c}.costModel()
	require.NoError(t, err)
	f := fusionOf(g, Options{Cluster: c}, cm)
	require.NotNil(t, f)
	return f
}

func sameKernel(f *fusion, vs ...ir.ValueID) bool {
	for _, v := range vs {
		if f.kernel[v] != f.kernel[vs[0]] {
			return false
		}
	}
	return true
}

// TestFusionSoftmax: Megatron-LM's scale-mask-softmax, forward and backward, is one kernel
// each way. With N = R·L elements of 4 bytes, the forward (scale, additive mask, softmax over
// rows of L) reads the scores and the mask and writes the probabilities: 12N bytes (and the
// 4-byte scale), where each op on its own moves 8N + 12N + 8N = 28N. The backward (dy·y, its row sums broadcast
// back, dy − that, times y) reads dy and y once and writes dx: 12N, where on its own it
// moves 12N + (4N + 4R) + (4R + 4N) + 12N + 12N = 44N + 8R.
func TestFusionSoftmax(t *testing.T) {
	const R, L = 64, 128
	N := int64(R * L)
	b := newGB(t, "softmax")
	s := b.input("s", R, L)
	mask := b.input("mask", R, L)
	scaled := b.op(ir.OpMul, "scaled", nil, s, b.scalar("k", 0.125))
	masked := b.op(ir.OpAdd, "masked", nil, scaled, mask)
	probs := b.op(ir.OpSoftmax, "probs", ir.Attrs{}.With("axis", 1), masked)
	b.g.AddOutput(probs, ir.Pos{})
	f := fusionOn(t, b.g, false)
	assert.True(t, sameKernel(f, scaled, masked, probs))
	assert.Equal(t, 12*N+4, kernelBytes(b.g, f)) // + the scale, a scalar
	assert.Equal(t, 28*N+4, kernelBytes(b.g, nil))

	b = newGB(t, "softmax_grad")
	dy := b.input("dy", R, L)
	y := b.input("y", R, L)
	dyy := b.op(ir.OpMul, "dyy", nil, dy, y)
	dot := b.op(ir.OpReduceSum, "dot", ir.Attrs{}.With("axes", []int{1}), dyy)
	dotb := b.op(ir.OpBroadcast, "dotb", ir.Attrs{}.With("dims", []int{0}).With("shape", []int{R, L}), dot)
	cen := b.op(ir.OpSub, "cen", nil, dy, dotb)
	dx := b.op(ir.OpMul, "dx", nil, y, cen)
	b.g.AddOutput(dx, ir.Pos{})
	f = fusionOn(t, b.g, false)
	assert.True(t, sameKernel(f, dyy, dot, dotb, cen, dx))
	assert.Equal(t, 12*N, kernelBytes(b.g, f))
	assert.Equal(t, 44*N+8*R, kernelBytes(b.g, nil))
}

// TestFusionReductionsEnd: a residual add fuses into the layer norm that reads it and is
// written once for its reader outside (multi-output); a column reduction (a bias gradient,
// summing over rows) takes its input's kernel but ends it: what reads its result starts a
// kernel of its own. A row reduction's row must fit maxFusedRowBytes.
func TestFusionReductionsEnd(t *testing.T) {
	const R, H = 32, 64
	b := newGB(t, "ln")
	x := b.input("x", R, H)
	y := b.input("y", R, H)
	res := b.op(ir.OpAdd, "res", nil, x, y)
	ln := b.op(ir.OpLayerNorm, "ln", nil, res, b.param("gamma", H), b.param("beta", H))
	sq := b.op(ir.OpMul, "sq", nil, ln, ln)
	col := b.op(ir.OpReduceSum, "col", ir.Attrs{}.With("axes", []int{0}), sq)
	after := b.op(ir.OpMul, "after", nil, col, b.scalar("k", 2))
	b.g.AddOutput(res, ir.Pos{})
	b.g.AddOutput(after, ir.Pos{})
	f := fusionOn(t, b.g, false)
	assert.True(t, sameKernel(f, res, ln))
	assert.True(t, f.writes(res), "a graph output")
	assert.False(t, f.writes(ln), "read by sq alone, in its kernel")
	assert.True(t, sameKernel(f, res, sq), "loop fusion after a row reduction")
	assert.False(t, sameKernel(f, res, col), "a row and a column reduction in one kernel")
	assert.True(t, f.writes(sq))
	assert.NotEqual(t, f.kernel[col], f.kernel[after], "a column reduction ends its kernel")
	assert.False(t, f.reads(sq, 1), "sq reads ln once, from inside")

	sig, row := reduceSig(b.g.Value(ln), b.g.Value(res).Type)
	assert.True(t, row)
	assert.Equal(t, "row 32x64", sig)
	_, row = reduceSig(b.g.Value(ln), f32(2, maxFusedRowBytes/4+1))
	assert.False(t, row, "a row past 64 KiB")
}

// TestFusionConvex: an op that reads both a kernel's value and a matmul of it cannot join the
// kernel (the matmul would run inside it), and a matmul stands alone unless the cluster
// fuses epilogues: then the bias add and gelu after it join it (cuBLASLt's GELU_BIAS), the
// matmul's result is not written, and the pre-activation is written only when read outside
// (GELU_AUX_BIAS).
func TestFusionConvex(t *testing.T) {
	const n = 32
	b := newGB(t, "convex")
	x := b.input("x", n, n)
	p := b.op(ir.OpExp, "p", nil, x)
	mm := b.op(ir.OpMatMul, "mm", nil, p, b.param("w", n, n))
	c := b.op(ir.OpAdd, "c", nil, p, mm)
	b.g.AddOutput(c, ir.Pos{})
	f := fusionOn(t, b.g, true)
	assert.False(t, sameKernel(f, p, c))
	assert.True(t, f.writes(p))

	for _, aux := range []bool{false, true} {
		b = newGB(t, "epilogue")
		x = b.input("x", n, 2*n)
		h := b.op(ir.OpMatMul, "h", nil, x, b.param("w", 2*n, n))
		z := b.op(ir.OpAdd, "z", nil, h, b.param("b", n))
		a := b.op(ir.OpGelu, "a", nil, z)
		b.g.AddOutput(a, ir.Pos{})
		if aux {
			b.g.AddOutput(z, ir.Pos{})
		}
		f = fusionOn(t, b.g, false)
		assert.False(t, sameKernel(f, h, z), "no epilogue")
		assert.True(t, sameKernel(f, z, a) && f.writes(h))
		f = fusionOn(t, b.g, true)
		assert.True(t, sameKernel(f, h, z, a))
		assert.False(t, f.writes(h))
		assert.Equal(t, aux, f.writes(z))
		// x, w and b read, a (and z) written: (2n·n + 2n·n + n + n·n [+ n·n])·4 bytes.
		want := int64(2*n*n+2*n*n+n+n*n) * 4
		if aux {
			want += n * n * 4
		}
		assert.Equal(t, want, kernelBytes(b.g, f), "aux %v", aux)
	}
}

// TestFusionLeaderAndBroadcast: kernels follow the ILP's groups, whose leaders are Alpa's
// (ties to the first operand): when the forward's y is computed and saved, dx = y·cen
// follows y, so the softmax gradient splits in two, cen written between them
// (docs/DECISIONS.md: a tie-break towards cen kept it whole but made the SC'21 stage ILPs
// far slower). A broadcast is never written: a reader outside its kernel reads what it
// broadcasts (a [L] vector, not the [R, L] broadcast), as XLA duplicates broadcasts into
// their consumers.
func TestFusionLeaderAndBroadcast(t *testing.T) {
	const R, L = 16, 32
	b := newGB(t, "softmax_grad")
	x := b.input("x", R, L)
	y := b.op(ir.OpExp, "y", nil, x)
	dy := b.op(ir.OpNeg, "dy", nil, b.input("g", R, L))
	dyy := b.op(ir.OpMul, "dyy", nil, dy, y)
	dot := b.op(ir.OpReduceSum, "dot", ir.Attrs{}.With("axes", []int{1}), dyy)
	dotb := b.op(ir.OpBroadcast, "dotb", ir.Attrs{}.With("dims", []int{0}).With("shape", []int{R, L}), dot)
	cen := b.op(ir.OpSub, "cen", nil, dy, dotb)
	dx := b.op(ir.OpMul, "dx", nil, y, cen)
	b.g.AddOutput(dx, ir.Pos{})
	b.g.AddOutput(y, ir.Pos{})
	assert.Equal(t, y, leaderOf(b.g, dx))
	f := fusionOn(t, b.g, false)
	assert.True(t, sameKernel(f, dy, dyy, dot, dotb, cen))
	assert.False(t, sameKernel(f, y, dx), "y → dyy → … → cen → dx: not convex")
	assert.False(t, sameKernel(f, cen, dx), "dx is in y's group")
	assert.True(t, f.writes(cen))

	b = newGB(t, "bcast")
	h := b.op(ir.OpNeg, "h", nil, b.input("h0", R, L))
	gb := b.op(ir.OpBroadcast, "gb", ir.Attrs{}.With("dims", []int{1}).With("shape", []int{R, L}), b.param("gamma", L))
	m := b.op(ir.OpMul, "m", nil, h, gb)
	b.g.AddOutput(m, ir.Pos{})
	f = fusionOn(t, b.g, false)
	assert.NotEqual(t, f.kernel[gb], f.kernel[m], "gb follows the param, m follows h")
	assert.False(t, f.writes(gb))
	assert.False(t, f.launches(gb))
	assert.Equal(t, 1.0/R, f.readScale(m, 1))
	// h0 read, gamma read through gb, m written: (R·L + L + R·L)·4 bytes; unfused, h and gb
	// are written and read too: (2R·L + (L + R·L) + 3R·L)·4.
	assert.Equal(t, int64(2*R*L+L)*4, kernelBytes(b.g, f))
	assert.Equal(t, int64(6*R*L+L)*4, kernelBytes(b.g, nil))
}

// TestFusionSpill: where a group's strategy splits a softmax's row before the softmax (exp's
// result split on dim 1 on a 1×2 mesh), the softmax cannot take it as produced: the
// resharding inside the kernel costs its collective and the spill of exp's result, written
// (its half) and read back (in the softmax's layout) at memory bandwidth.
func TestFusionSpill(t *testing.T) {
	const R, L = 64, 128
	b := newGB(t, "spill")
	p := b.op(ir.OpExp, "p", nil, b.param("x", R, L))
	s := b.op(ir.OpSoftmax, "s", ir.Attrs{}.With("axis", 1), p)
	b.g.AddOutput(s, ir.Pos{})
	c, lm := benchMesh(t, "dgx-a100", 1, 2)
	pl, err := newPlanner(b.g, lm, Options{Cluster: c, NoPrune: true})
	require.NoError(t, err)
	require.True(t, pl.fu.internal(p, s))
	require.Equal(t, pl.groupOf[p], pl.groupOf[s])
	split := 0
	for _, gs := range pl.groups[pl.groupOf[p]].strats {
		ps := &pl.cands[p][gs.pick[pl.memberIdx[p]]]
		ss := &pl.cands[s][gs.pick[pl.memberIdx[s]]]
		if ps.Out.Dims[1] == mesh.AxesNone {
			assert.Zero(t, gs.reshard)
			continue
		}
		split++
		in, err := lm.LocalBytes(ir.Shape{R, L}, 4, ss.In[0])
		require.NoError(t, err)
		want := pl.reshard(p, ps.Out, ss.In[0]).Time + float64(R*L*4/2+in)/c.DeviceMemoryBandwidth
		assert.InEpsilon(t, want, gs.reshard, 1e-12)
	}
	assert.Positive(t, split)
}
