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

func TestBlockPrintDeriveVerify(t *testing.T) {
	g := NewGraph("b")
	w, err := g.Declare(OpParam, "l0.w", Type{F32, Shape{4}}, -1, Pos{"t.ir", 1, 1})
	require.NoError(t, err)
	g.Value(w).Block = 3
	h := mustAppend(t, g, OpNeg, "l0.h", []ValueID{w}, nil)
	g.Value(h).Block = 3
	gw := mustAppend(t, g, OpNeg, "anything", []ValueID{h}, nil)
	g.SetDerived(gw, RoleOf(RoleGrad, w))
	k := mustAppend(t, g, OpNeg, "shared", []ValueID{w}, nil)
	g.SetDerived(k, RoleOf(RoleBackward, NoValue))
	require.NoError(t, Verify(g))
	assert.Equal(t, Block(3), g.Value(gw).Block, "a gradient is in its param's block")
	assert.Equal(t, NoBlock, g.Value(k).Block, "what no value is derived from is in no block")
	assert.Equal(t, "graph b\nparam l0.w: f32[4] block=3\nl0.h = neg l0.w block=3\nanything = neg l0.h block=3 role=grad of=l0.w\nshared = neg l0.w role=backward\n", g.String())
	blocks, any := g.Blocks()
	assert.True(t, any)
	assert.Equal(t, []Block{3, 3, 3, 0}, blocks)

	g.Value(h).Block = -2
	assert.ErrorContains(t, Verify(g), "l0.h: block -2 is out of range: blocks are numbered from 1")
	assert.NoError(t, CheckBlock(MaxBlock))
	assert.Error(t, CheckBlock(0))
	assert.Error(t, CheckBlock(MaxBlock+1))
}
