package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/plan"
)

// The same plan, compiled twice or written and read back, gives byte-identical DOT.
func TestGraphIsDeterministic(t *testing.T) {
	c := planCases[1]
	a, b := compileFresh(t, c), compileFresh(t, c)
	var buf bytes.Buffer
	require.NoError(t, a.WriteJSON(&buf))
	back, err := plan.ReadPlan(&buf)
	require.NoError(t, err)
	for _, ops := range []bool{false, true} {
		ga, err := Graph(a, Options{Ops: ops})
		require.NoError(t, err)
		gb, err := Graph(b, Options{Ops: ops})
		require.NoError(t, err)
		gc, err := Graph(back, Options{Ops: ops})
		require.NoError(t, err)
		assert.Equal(t, ga.String(), gb.String())
		assert.Equal(t, ga.String(), gc.String())
	}
}

// Every operand a stage reads from another stage is one send/recv edge of the op view, and
// every stage is a cluster named after it.
func TestGraphCrossStageEdges(t *testing.T) {
	for _, c := range planCases {
		t.Run(c.name, func(t *testing.T) {
			p := compilePlan(t, c)
			g, err := Graph(p, Options{Ops: true})
			require.NoError(t, err)
			text := g.String()
			cross := 0
			for _, st := range p.Stages {
				listed := map[string]bool{}
				for _, v := range st.Values {
					listed[v.Name] = true
				}
				for _, v := range st.Values {
					id, _ := p.Step().Lookup(v.Name)
					for _, a := range p.Step().Value(id).Args {
						if !listed[p.Step().Value(a).Name] {
							cross++
						}
					}
				}
			}
			assert.Equal(t, cross, strings.Count(text, `label="send/recv `))
			for s := range p.Stages {
				assert.Contains(t, text, `id="cluster_stage`+string(rune('0'+s))+`"`)
			}
		})
	}
}

func TestGraphRejectsBadPlans(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(p *plan.Plan)
		opts   Options
		want   string
	}{
		{"spec of the wrong rank", func(p *plan.Plan) {
			p.Stages[0].Values[0].Spec = mesh.MustParseSpec("RRR")
		}, Options{}, "has 3 dims, expected 2"},
		{"operand specs missing one", func(p *plan.Plan) {
			for i, v := range p.Stages[0].Values {
				if len(v.In) > 1 {
					p.Stages[0].Values[i].In = v.In[:1]
					return
				}
			}
		}, Options{}, "operand specs, expected"},
		{"operand nobody holds", func(p *plan.Plan) {
			for s := range p.Stages {
				vals := p.Stages[s].Values
				for i, v := range vals {
					if v.Name == "l0.fc" {
						p.Stages[s].Values = append(vals[:i:i], vals[i+1:]...)
					}
				}
			}
		}, Options{Ops: true}, "which no stage of the plan lists"},
		{"spec using an axis twice", func(p *plan.Plan) {
			for s, st := range p.Stages {
				for i, v := range st.Values {
					if v.Name == "l1.fc.matmul" {
						p.Stages[s].Values[i].In[0] = mesh.Spec{Dims: []mesh.AxisSet{1, 1}}
					}
				}
			}
		}, Options{}, "l1.fc.matmul operand 0"},
		{"too many nodes", func(p *plan.Plan) {}, Options{Ops: true, MaxNodes: 10}, "op view of mlp (every stage, every layer) has 80 nodes, more than the limit of 10"},
		{"too many nodes in a stage", func(p *plan.Plan) {}, Options{Ops: true, MaxNodes: 10, Stage: ptr(0)}, "(stage 0, every layer) has"},
		{"no such stage", func(p *plan.Plan) {}, Options{Ops: true, Stage: ptr(7)}, "--stage 7: the plan has 3 stages, expected 0 to 2"},
		{"no such layer", func(p *plan.Plan) {}, Options{Ops: true, Layer: ptr(-1)}, "--layer -1: the plan has"},
		{"layer of another stage", func(p *plan.Plan) {}, Options{Ops: true, Stage: ptr(0), Layer: ptr(3)}, "--layer 3 is not in stage 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := compilePlan(t, planCases[1])
			tc.break_(p)
			_, err := Graph(p, tc.opts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := Graph(&plan.Plan{}, Options{})
	assert.ErrorIs(t, err, errNoStep)
	_, err = Graph(nil, Options{})
	assert.ErrorIs(t, err, errNoStep)
}

func ptr(n int) *int { return &n }
