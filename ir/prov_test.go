package ir

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProvPrintIndexVerify(t *testing.T) {
	g := NewGraph("p")
	w, err := g.Declare(OpParam, "w", Type{F32, Shape{4}}, -1, Pos{"t.ir", 1, 1})
	require.NoError(t, err)
	gw := mustAppend(t, g, OpNeg, "anything", []ValueID{w}, nil)
	g.SetProv(gw, RoleOf(RoleGrad, w))
	m, err := g.Declare(OpState, "m", Type{F32, Shape{4}}, -1, Pos{"t.ir", 3, 1})
	require.NoError(t, err)
	g.SetProv(m, Prov{Role: RoleState, Of: w, Slot: "m"})
	require.NoError(t, Verify(g))
	assert.Equal(t, "graph p\nparam w: f32[4]\nanything = neg w role=grad of=w\nstate m: f32[4] role=state of=w slot=m\n", g.String())

	got, ok := g.GradOf(w)
	assert.True(t, ok)
	assert.Equal(t, gw, got)
	assert.Equal(t, []ValueID{gw, NoValue, NoValue}, g.ByRole(RoleGrad))
	assert.Equal(t, []ValueID{m, NoValue, NoValue}, g.ByRole(RoleState))
	_, ok = g.GradOf(m)
	assert.False(t, ok)

	for name, p := range map[string]Prov{
		"anything cannot be the grad of itself": RoleOf(RoleGrad, gw),
		"which is not in the graph":             RoleOf(RoleGrad, 7),
		"unknown role":                          {Role: numRoles},
	} {
		g.SetProv(gw, p)
		assert.ErrorContains(t, Verify(g), name)
	}
	for r := RoleForward; r < numRoles; r++ {
		back, ok := ParseRole(r.String())
		assert.True(t, ok)
		assert.Equal(t, r, back)
	}
}
