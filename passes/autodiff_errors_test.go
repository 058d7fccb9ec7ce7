package passes

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
)

func parse(t *testing.T, src string) *ir.Graph {
	t.Helper()
	g, err := frontend.Parse("model.ir", []byte(src))
	require.NoError(t, err)
	return g
}

func gradOf(t *testing.T, g *ir.Graph, wrt ...string) (*ir.Graph, []ir.ValueID, error) {
	t.Helper()
	ids := make([]ir.ValueID, len(wrt))
	for i, n := range wrt {
		id, ok := g.Lookup(n)
		require.True(t, ok, n)
		ids[i] = id
	}
	return Grad(g, g.Outputs[0].Value, ids)
}

func TestGradErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		wrt       []string
		want      string
	}{
		{
			name: "compare cast back to float",
			src: `param w1: f32[4]
input x: f32[4]
h = mul x, w1
z = constant value=0.0 type=f32[]
m = gt h, z
mf = cast m to=f32
p = mul mf, x
loss = reduce_sum p axes=[0]
output loss
`,
			wrt:  []string{"w1"},
			want: "model.ir:5:5: grad: gt is not differentiable (used at model.ir:6:6 on the path from w1 to loss)\n\tmodel.ir:6:6: note: mf = cast uses m, of type bool[4], here",
		},
		{
			name: "integer cast",
			src: `param w: f32[3]
i = cast w to=i32
f = cast i to=f32
loss = reduce_sum f axes=[0]
output loss
`,
			wrt:  []string{"w"},
			want: "model.ir:2:5: grad: cast is not differentiable (used at model.ir:3:5 on the path from w to loss)\n\tmodel.ir:3:5: note: f = cast uses i, of type i32[3], here",
		},
		{
			name: "gradient op in a forward graph",
			src: `param x: f32[1,1,4,4]
input dy: f32[1,1,2,2]
g = max_pool_grad x, dy window=[2,2] stride=[2,2]
loss = reduce_sum g axes=[0,1,2,3]
output loss
`,
			wrt:  []string{"x"},
			want: "model.ir:3:5: grad: max_pool_grad is not differentiable (used at model.ir:3:5 on the path from x to loss)",
		},
		{
			name: "integer wrt",
			src:  "input y: i32[3]\nparam w: f32[3]\nloss = reduce_sum w axes=[0]\noutput loss\n",
			wrt:  []string{"y"},
			want: "model.ir:1:7: grad: cannot differentiate with respect to y: it is i32[3], not a float tensor",
		},
		{
			name: "wrt twice",
			src:  "param w: f32[3]\nloss = reduce_sum w axes=[0]\noutput loss\n",
			wrt:  []string{"w", "w"},
			want: "model.ir:1:7: grad: w is listed twice among the values to differentiate with respect to",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := gradOf(t, parse(t, tc.src), tc.wrt...)
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
			var ie *ir.Error
			assert.True(t, errors.As(err, &ie), "want a positioned *ir.Error")
		})
	}
}

// Conditions, indices and labels depend on params without making the loss
// non-differentiable: they simply get no gradient.
func TestGradDiscreteOperandsAreFine(t *testing.T) {
	g := parse(t, `param w: f32[4]
param table: f32[5,4]
input ids: i32[4] limit=5
z = constant value=0.0 type=f32[]
m = gt w, z
r = where m, w, z
e = gather table, ids
s = add e, r
loss = reduce_sum s axes=[0,1]
output loss
`)
	out, grads, err := gradOf(t, g, "w", "table")
	require.NoError(t, err)
	require.NoError(t, ir.Verify(out))
	assert.Equal(t, "grad.w", out.Value(grads[0]).Name)
	assert.Equal(t, "grad.table", out.Value(grads[1]).Name)
}

func TestGradNamesAndFanOut(t *testing.T) {
	g := parse(t, `param w: f32[3]
param unused: f32[2]
input x: f32[3]
a = mul x, w
b = exp a
c = add a, b
dead = tanh a
loss = reduce_sum c axes=[0]
output loss
`)
	out, grads, err := gradOf(t, g, "w", "unused")
	require.NoError(t, err)
	require.NoError(t, ir.Verify(out))
	// a feeds b and c: two contributions, summed into d.a in sweep order (c first).
	// The gradient of add passes d.c straight through to a and b (no op); exp's
	// contribution is the first built, d.a.1; no op is built for the dead tanh. Each value
	// says what it is (role=) and of which value (of=), which is what other packages read.
	want := `d.loss = constant type=f32[] value=1.0 role=adjoint of=loss
d.c = broadcast d.loss dims=[] shape=[3] role=adjoint of=c
d.a.1 = mul d.c, b role=adjoint_part of=a
d.a = add d.c, d.a.1 role=adjoint of=a
grad.w = mul d.a, x role=grad of=w
grad.unused = constant type=f32[2] value=0.0 role=grad of=unused
`
	var got strings.Builder
	for i := len(g.Values); i < len(out.Values); i++ {
		got.WriteString(ir.FormatValue(out, ir.ValueID(i)) + "\n")
	}
	assert.Equal(t, want, got.String())
	assert.Equal(t, []string{"grad.w", "grad.unused"}, []string{out.Value(grads[0]).Name, out.Value(grads[1]).Name})
	// Lookup works on the result: the name index was rebuilt after renaming.
	id, ok := out.Lookup("d.a")
	require.True(t, ok)
	assert.Equal(t, ir.OpAdd, out.Value(id).Op)
	// Deterministic: a second run prints the same graph.
	again, _, err := gradOf(t, g, "w", "unused")
	require.NoError(t, err)
	assert.Equal(t, out.String(), again.String())
}
