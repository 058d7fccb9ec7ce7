package sharding

import (
	"context"
	"flag"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
)

func tinyStep(t testing.TB, name string) *ir.Graph {
	g, err := frontend.ParseFile("../../testdata/models/" + name + ".ir")
	require.NoError(t, err)
	g, err = passes.TrainingStep(g, passes.Optimizer{Kind: "sgd", LR: 0.01})
	require.NoError(t, err)
	return g
}

// TestCutLabels: the cut classifies the expert einsums of the tiny MoE by einsumcut.go's
// rule, a kept candidate splits no label but a batch one on an axis a lead label can take,
// and the tiny Wide-ResNet (convolutions) is left alone.
func TestCutLabels(t *testing.T) {
	c, lm := benchMesh(t, "p3.16xlarge", 2, 4)
	for _, name := range []string{"moe-tiny", "wresnet-tiny"} {
		g := tinyStep(t, name)
		p := &planner{g: g, lm: lm, opts: Options{Cluster: c}}
		cands, err := CandidatesWith(g, lm, p.opts)
		require.NoError(t, err)
		p.cands = cands
		seen := map[string]int{}
		for i := range g.Values {
			v := ir.ValueID(i)
			val := g.Value(v)
			allowed := p.einsumAllowed(v)
			d, batch, lead, ok := p.cutLabels(v)
			if sp, _ := val.Attrs.Get("spec"); sp != nil && ok {
				spec := sp.(string)
				seen[spec]++
				switch spec {
				case "egch,ehf->egcf", "egcf,efh->gech":
					// batch e, g, c; lead e alone.
					assert.Equal(t, []bool{true, true, true, false, false}, batch, spec)
					assert.Equal(t, []bool{true, false, false, false, false}, lead, spec)
				case "egcf,egch->ehf":
					// the weight gradient: batch and lead e.
					assert.Equal(t, []bool{true, false, false, false, false}, batch, spec)
					assert.Equal(t, []bool{true, false, false, false, false}, lead, spec)
				case "gsec,gech->gsh":
					// batch and lead g.
					assert.Equal(t, []bool{true, false, false, false, false}, batch, spec)
					assert.Equal(t, []bool{true, false, false, false, false}, lead, spec)
				case "gsec,gsh->egch":
					// batch g, e, c; lead g.
					assert.Equal(t, []bool{true, false, true, true, false}, batch, spec)
					assert.Equal(t, []bool{true, false, false, false, false}, lead, spec)
				}
			}
			if name == "wresnet-tiny" {
				assert.Nil(t, allowed, "%s: the cut leaves %s alone", name, val.Name)
			}
			if allowed == nil {
				continue
			}
			kept := 0
			for k, s := range p.cands[v] {
				if !allowed[k] {
					continue
				}
				kept++
				for i, labels := range d.Operands {
					for dim, l := range labels {
						if l < 0 || batch[l] {
							continue
						}
						for a := range 2 {
							if s.In[i].Dims[dim].Has(a) {
								for m, isLead := range lead {
									assert.False(t, isLead && d.Sizes[m]%lm.Shape[a] == 0,
										"%s: label %d split on axis %d that lead label %d could take", val.Name, l, a, m)
								}
							}
						}
					}
				}
			}
			assert.Positive(t, kept, val.Name)
			assert.Less(t, kept, len(allowed), val.Name)
		}
		t.Logf("%s: cut specs %v", name, seen)
		if name == "moe-tiny" {
			for _, spec := range []string{"egch,ehf->egcf", "egcf,efh->gech", "gsec,gsh->egch", "gsec,gech->gsh", "egcf,egch->ehf"} {
				assert.Positive(t, seen[spec], spec)
			}
		}
	}
}

var cutPlans = flag.Bool("cutplans", false,
	"TestCutKeepsPlans: also the 2×2, 2×4 and 4×2 meshes (minutes)")

// TestCutKeepsPlans: the cut leaves the tiny MoE's predicted step equal to the ILP's
// without it (Options.FullEinsums), with fewer variables: on 1×4 by default, with
// -cutplans also on 2×2, 2×4 and 4×2 (about a minute each; BenchmarkILPSize measures
// the same meshes against the ILP with no reduction at all).
func TestCutKeepsPlans(t *testing.T) {
	meshes := [][2]int{{1, 4}}
	if *cutPlans {
		meshes = append(meshes, [2]int{2, 2}, [2]int{2, 4}, [2]int{4, 2})
	}
	g := tinyStep(t, "moe-tiny")
	for _, shape := range meshes {
		t.Run(fmt.Sprintf("moe-tiny/%dx%d", shape[0], shape[1]), func(t *testing.T) {
			c, lm := benchMesh(t, "p3.16xlarge", shape[0], shape[1])
			want, err := Solve(context.Background(), g, lm, Options{Cluster: c, FullEinsums: true})
			require.NoError(t, err)
			got, err := Solve(context.Background(), g, lm, Options{Cluster: c})
			require.NoError(t, err)
			assert.InDelta(t, want.Cost.Total, got.Cost.Total, 1e-9*want.Cost.Total)
			assert.Less(t, got.ILP.Variables, want.ILP.Variables)
			assert.Positive(t, got.ILP.Cut)
			t.Logf("step %.1f µs → %.1f µs, variables %d → %d, edge variables %d → %d, cut %d",
				want.Cost.Total*1e6, got.Cost.Total*1e6, want.ILP.Variables, got.ILP.Variables,
				want.ILP.EdgeVars, got.ILP.EdgeVars, got.ILP.Cut)
		})
	}
}

// TestConvCut: on the tiny Wide-ResNet on 2×2, the convolution cut drops exactly the
// convolutions' reduce-scatters onto a spatial dim (convScatterCut), some of each kind of
// convolution, and leaves every other candidate as it was, in order.
func TestConvCut(t *testing.T) {
	c, lm := benchMesh(t, "p3.16xlarge", 2, 2)
	g := tinyStep(t, "wresnet-tiny")
	full, err := CandidatesWith(g, lm, Options{Cluster: c, FullConvs: true})
	require.NoError(t, err)
	cut, err := CandidatesWith(g, lm, Options{Cluster: c})
	require.NoError(t, err)
	spatial := func(s Strategy) bool {
		for _, col := range s.Collectives {
			if col.Kind == mesh.ReduceScatter && col.Dim >= 2 {
				return true
			}
		}
		return false
	}
	dropped := map[ir.Op]int{}
	for i := range g.Values {
		v := ir.ValueID(i)
		op := g.Value(v).Op
		conv := op == ir.OpConv2D || op == ir.OpConv2DInputGrad || op == ir.OpConv2DFilterGrad
		var kept []string
		for _, s := range full[v] {
			if conv && spatial(s) {
				dropped[op]++
				continue
			}
			kept = append(kept, s.Name)
		}
		var got []string
		for _, s := range cut[v] {
			assert.False(t, conv && spatial(s), "%s keeps %s", g.Value(v).Name, s.Name)
			got = append(got, s.Name)
		}
		assert.Equal(t, kept, got, g.Value(v).Name)
	}
	for _, op := range []ir.Op{ir.OpConv2D, ir.OpConv2DInputGrad} {
		assert.Positive(t, dropped[op], op.String())
	}
	t.Logf("dropped %v", dropped)
}

// TestConvCutKeepsPlans: the convolution cut leaves the tiny Wide-ResNet's predicted step
// equal to the ILP's without it (Options.FullConvs), with fewer variables: on 1×4 by
// default, with -cutplans also on 2×2, 2×4 and 4×2 (several seconds each).
func TestConvCutKeepsPlans(t *testing.T) {
	meshes := [][2]int{{1, 4}}
	if *cutPlans {
		meshes = append(meshes, [2]int{2, 2}, [2]int{2, 4}, [2]int{4, 2})
	}
	g := tinyStep(t, "wresnet-tiny")
	for _, shape := range meshes {
		t.Run(fmt.Sprintf("wresnet-tiny/%dx%d", shape[0], shape[1]), func(t *testing.T) {
			c, lm := benchMesh(t, "p3.16xlarge", shape[0], shape[1])
			want, err := Solve(context.Background(), g, lm, Options{Cluster: c, FullConvs: true})
			require.NoError(t, err)
			got, err := Solve(context.Background(), g, lm, Options{Cluster: c})
			require.NoError(t, err)
			assert.InDelta(t, want.Cost.Total, got.Cost.Total, 1e-9*want.Cost.Total)
			assert.Less(t, got.ILP.Variables, want.ILP.Variables)
			t.Logf("step %.1f µs → %.1f µs, variables %d → %d, edge variables %d → %d",
				want.Cost.Total*1e6, got.Cost.Total*1e6, want.ILP.Variables, got.ILP.Variables,
				want.ILP.EdgeVars, got.ILP.EdgeVars)
		})
	}
}
