package render

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
				golden(t, name, g.String())
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
			golden(t, c.name+"-ops-jax.dot", text)
		}
	}
}
