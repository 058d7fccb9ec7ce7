package safetensors

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/kernels"
)

func sample() map[string]*kernels.Tensor {
	return map[string]*kernels.Tensor{
		"w":    kernels.FromF64(ir.F32, ir.Shape{2, 3}, []float64{1, -2, 3.5, 0, 1e-30, -7}),
		"b":    kernels.FromF64(ir.F64, ir.Shape{3}, []float64{0.1, 0.2, 0.3}),
		"ids":  kernels.FromF64(ir.I64, ir.Shape{2}, []float64{-5, 1 << 40}),
		"i":    kernels.FromF64(ir.I32, ir.Shape{}, []float64{-3}),
		"mask": kernels.FromF64(ir.Bool, ir.Shape{2, 2}, []float64{1, 0, 0, 1}),
	}
}

func TestRoundTripIsExactAndDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	require.NoError(t, Write(&a, sample(), map[string]string{"source": "test"}))
	require.NoError(t, Write(&b, sample(), map[string]string{"source": "test"}))
	require.Equal(t, a.Bytes(), b.Bytes())
	got, meta, err := Read(a.Bytes())
	require.NoError(t, err)
	require.Equal(t, "test", meta["source"])
	for name, want := range sample() {
		require.Contains(t, got, name)
		require.True(t, want.Type.Equal(got[name].Type), "%s: %s vs %s", name, got[name].Type, want.Type)
		for i := range want.Len() {
			require.Equal(t, want.At(i), got[name].At(i), "%s[%d]", name, i)
		}
	}
	hl := binary.LittleEndian.Uint64(a.Bytes()[:8])
	require.Zero(t, (8+hl)%8, "data is 8-byte aligned")
}

func TestReadErrors(t *testing.T) {
	var good bytes.Buffer
	require.NoError(t, Write(&good, sample(), nil))
	huge := append([]byte{}, good.Bytes()...)
	binary.LittleEndian.PutUint64(huge, 1<<40)
	header := func(h string) []byte {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(h)))
		return append(append(n[:], h...), make([]byte, 8)...)
	}
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"short":        {[]byte{1, 2}, "shorter than the 8-byte header length"},
		"huge header":  {huge, "does not fit"},
		"truncated":    {good.Bytes()[:good.Len()-3], "do not hold"},
		"not json":     {header("{nope"), "not a JSON object"},
		"bad dtype":    {header(`{"w":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}`), `dtype "C64"`},
		"bad offsets":  {header(`{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}`), "tensor w: bytes [0, 8) do not hold f32[4]"},
		"past the end": {header(`{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`), "do not hold"},
		"bad shape":    {header(`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}`), "bad shape"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := Read(tc.data)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestApply(t *testing.T) {
	g := ir.NewGraph("g")
	_, err := g.Declare(ir.OpParam, "w", ir.Type{DType: ir.F32, Shape: ir.Shape{2, 3}}, -1, ir.Pos{})
	require.NoError(t, err)
	_, err = g.Declare(ir.OpInput, "x", ir.Type{DType: ir.F32, Shape: ir.Shape{2}}, 0, ir.Pos{})
	require.NoError(t, err)
	params := map[string]*kernels.Tensor{}
	n, err := Apply(g, params, map[string]*kernels.Tensor{"w": sample()["w"]})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, -7.0, params["w"].At(5))

	_, err = Apply(g, params, map[string]*kernels.Tensor{"x": sample()["b"]})
	require.ErrorContains(t, err, "x is not a param of graph g")
	_, err = Apply(g, params, map[string]*kernels.Tensor{"w": sample()["b"]})
	require.ErrorContains(t, err, "w is f64[3] in the weights but f32[2,3] in graph g")
}
