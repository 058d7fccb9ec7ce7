package interp

import (
	"hash/fnv"
	"math"
	"math/rand/v2"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/kernels"
)

// rng returns a generator that depends only on seed and name, so that a value's data does
// not change when other values are added, removed or reordered.
func rng(seed int64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
}

// InitParams returns a tensor for every param and state of g. A param follows its init
// attribute: "zeros", "ones", or "normal" (the default): N(0, 1/fan_in) with fan_in the
// product of all dims but the last (1 for scalars and 1-D params), the scaling that keeps
// activations of unit size through a matmul. Integer params get zeros. State starts at
// zero. The data is deterministic per (seed, name).
func InitParams(g *ir.Graph, seed int64) Feeds {
	f := Feeds{}
	for i := range g.Values {
		v := &g.Values[i]
		switch v.Op {
		case ir.OpParam:
			f[v.Name] = initParam(v, seed)
		case ir.OpState:
			f[v.Name] = kernels.New(v.Type)
		}
	}
	return f
}

func initParam(v *ir.Value, seed int64) *kernels.Tensor {
	t := kernels.New(v.Type)
	init := "normal"
	if s, ok := v.Attrs.Get("init"); ok {
		init = s.(string)
	}
	switch {
	case init == "ones":
		for i := range t.Len() {
			t.Set(i, 1)
		}
	case init == "normal" && v.Type.DType.IsFloat():
		s := v.Type.Shape
		fanIn := 1
		if len(s) > 1 {
			fanIn = int(ir.Shape(s[:len(s)-1]).NumElements())
		}
		std := 1 / math.Sqrt(float64(fanIn))
		r := rng(seed, v.Name)
		for i := range t.Len() {
			t.Set(i, std*r.NormFloat64())
		}
	}
	return t
}

// GenerateInputs returns random data for every data input of g: floats ~ N(0, 1), bools
// uniform in {0, 1}, integers uniform in [0, limit) with limit the input's limit attribute.
// An integer input without a limit is an error naming it, positioned at its declaration:
// no bound is safe to guess for token ids or labels. The data is deterministic per
// (seed, name).
func GenerateInputs(g *ir.Graph, seed int64) (Feeds, error) {
	f := Feeds{}
	for i := range g.Values {
		v := &g.Values[i]
		if v.Op != ir.OpInput {
			continue
		}
		t, err := randomInput(v, seed)
		if err != nil {
			return nil, err
		}
		f[v.Name] = t
	}
	return f, nil
}

// RandomInputs is GenerateInputs for callers that cannot fail: an integer input with no
// limit is left out, and Run then reports it as a missing feed with the reason.
func RandomInputs(g *ir.Graph, seed int64) Feeds {
	f := Feeds{}
	for i := range g.Values {
		v := &g.Values[i]
		if v.Op != ir.OpInput {
			continue
		}
		if t, err := randomInput(v, seed); err == nil {
			f[v.Name] = t
		}
	}
	return f
}

func randomInput(v *ir.Value, seed int64) (*kernels.Tensor, error) {
	t := kernels.New(v.Type)
	r := rng(seed, v.Name)
	switch dt := v.Type.DType; {
	case dt.IsFloat():
		for i := range t.Len() {
			t.Set(i, r.NormFloat64())
		}
	case dt == ir.Bool:
		for i := range t.Len() {
			t.Int[i] = int64(r.IntN(2))
		}
	default:
		limit, _ := v.Attrs.Get("limit")
		if l, ok := limit.(int); !ok || l <= 0 {
			return nil, ir.Errorf(v.Pos, "input %s of type %s has no limit attribute: random integer data needs a bound, like limit=1000", v.Name, v.Type)
		}
		for i := range t.Len() {
			t.Int[i] = r.Int64N(int64(limit.(int)))
		}
	}
	return t, nil
}
