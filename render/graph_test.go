package render

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/internal/golden"
	"github.com/autopar/autopar/mesh"
)

func TestGraphGolden(t *testing.T) {
	for _, c := range planCases {
		p := compilePlan(t, c)
		for _, ops := range []bool{false, true} {
			name := c.name + "-layers.dot"
			if ops {
				name = c.name + "-ops.dot"
			}
			t.Run(name, func(t *testing.T) {
				g, err := Graph(p, Options{Ops: ops})
				require.NoError(t, err)
				golden.Check(t, name, g.String())
			})
		}
	}
}

// TestGraphNotation draws the op view in JAX's and DTensor's notation: every node shows
// its value's spec as that framework writes it, and the layout of the picture is the
// same as in Alpa's.
func TestGraphNotation(t *testing.T) {
	c := planCases[2] // tensor parallel: specs with S1
	p := compilePlan(t, c)
	alpa, err := Graph(p, Options{Ops: true})
	require.NoError(t, err)
	for _, nt := range []mesh.Notation{mesh.JAX, mesh.DTensor} {
		g, err := Graph(p, Options{Ops: true, Notation: nt})
		require.NoError(t, err)
		text := g.String()
		for _, st := range p.Stages {
			for _, v := range st.Values {
				assert.Contains(t, text, v.Name+`\n`+v.Op+" ")
				assert.Contains(t, text, nt.Format(v.Spec), "%s of %s", nt, v.Name)
			}
		}
		assert.Equal(t, strings.Count(alpa.String(), "->"), strings.Count(text, "->"), "same edges")
		if nt == mesh.JAX {
			golden.Check(t, c.name+"-ops-jax.dot", text)
		}
	}
}

// TestGraphFilters draws one stage and one layer of the op view: only their values are
// nodes, operands from elsewhere are grey names, and the count the limit checks is the
// filtered one.
func TestGraphFilters(t *testing.T) {
	p := compilePlan(t, planCases[1])
	stage, layer := 1, p.Stages[1].FirstLayer
	g, err := Graph(p, Options{Ops: true, Stage: &stage, Layer: &layer, MaxNodes: 40})
	require.NoError(t, err)
	text := g.String()
	kept := 0
	for s, st := range p.Stages {
		for _, v := range st.Values {
			if s == stage && min(max(v.Layer, st.FirstLayer), st.LastLayer) == layer {
				kept++
				assert.Contains(t, text, `label="`+v.Name+`\n`+v.Op+" ", v.Name)
			}
		}
	}
	require.Positive(t, kept)
	assert.Equal(t, kept, strings.Count(text, `style="filled"`), "one op node per kept value")
	assert.Contains(t, text, `\n(stage 0)`, "an operand from stage 0 is drawn as its name")
	golden.Check(t, planCases[1].name+"-ops-stage1.dot", text)
}
