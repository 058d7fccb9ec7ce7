package sharding

import "github.com/autopar/autopar/ir"

// Elementwise fusion (mesh.Cluster.FuseElementwise). The rule, exactly: an edge from
// value p to value c is fused when
//
//   - both are elementwise ops (ir.CatElementwise in the op table),
//   - c is p's only reader (it may read p in several operands), p is neither a graph
//     output nor an update's value or target,
//   - c follows p (leaderOf(c) == p) with merging on and neither forced, so that c sits in
//     p's ILP group and takes p in the layout p is produced in: no resharding sits inside
//     a chain (an exact match always exists, as p has c's shape), and
//   - p has c's shape (no broadcast of the intermediate).
//
// Over a fused edge p's result is neither written by p nor read by c, and p pays no
// kernel overhead: the chain's last op, whose result is written, pays the one overhead of
// the fused kernel. FLOPs are unchanged. Each op keeps its own roofline max over its own
// remaining bytes, so a chain is priced at the sum of its ops' maxes, never below the
// fused kernel's single max.
type fusion struct {
	// noWrite[v]: v's result stays in the fused kernel (v pays no write, no overhead).
	noWrite []bool
}

// fusionOf finds the fused edges of g under opts; nil when the cluster does not fuse.
func fusionOf(g *ir.Graph, opts Options, cm costModel) *fusion {
	if cm.cluster == nil || !cm.cluster.FuseElementwise || cm.alpa || opts.NoMerge {
		return nil
	}
	n := len(g.Values)
	reader := make([]ir.ValueID, n)
	for i := range reader {
		reader[i] = ir.NoValue
	}
	many := make([]bool, n)
	for id := range n {
		for _, a := range g.Values[id].Args {
			if reader[a] != ir.NoValue && reader[a] != ir.ValueID(id) {
				many[a] = true
			}
			reader[a] = ir.ValueID(id)
		}
	}
	for _, o := range g.Outputs {
		many[o.Value] = true
	}
	for _, u := range g.Updates {
		many[u.Value], many[u.Target] = true, true
	}
	forced := func(v ir.ValueID) bool {
		_, a := opts.Force[v]
		_, b := opts.ForceSpec[v]
		return a || b
	}
	f := &fusion{noWrite: make([]bool, n)}
	for id := range n {
		p := ir.ValueID(id)
		c := reader[id]
		if many[id] || c == ir.NoValue {
			continue
		}
		pv, cv := g.Value(p), g.Value(c)
		if pv.Op.Def().Category != ir.CatElementwise || cv.Op.Def().Category != ir.CatElementwise ||
			forced(p) || forced(c) || leaderOf(g, c) != p || !pv.Type.Shape.Equal(cv.Type.Shape) {
			continue
		}
		f.noWrite[id] = true
	}
	return f
}

// fusedWrite reports whether v's result stays inside a fused kernel.
func (f *fusion) fusedWrite(v ir.ValueID) bool { return f != nil && f.noWrite[v] }
