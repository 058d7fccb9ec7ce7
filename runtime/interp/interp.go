package interp

import (
	"context"
	"fmt"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/kernels"
)

// Feeds holds the tensors of a graph's leaves by name: params, inputs and state.
type Feeds map[string]*kernels.Tensor

// Result is what one run of a graph computed.
type Result struct {
	// Values is indexed by ir.ValueID; an entry is nil where the value was freed after its
	// last use. Leaves hold the fed tensors themselves.
	Values []*kernels.Tensor
	// Outputs holds g.Outputs in order.
	Outputs []*kernels.Tensor
	// Updates maps each update's target name to its new value.
	Updates Feeds
}

// Options tune a run.
type Options struct {
	// KeepAll keeps every value in Result.Values instead of freeing each after its last use:
	// for tests and --check, which compare intermediate values.
	KeepAll bool
}

// Run evaluates g on feeds and keeps only the outputs and the update values (and the
// leaves, which belong to the caller). A missing or mistyped feed is an error positioned
// at the leaf's declaration; a kernel error is positioned at the failing value and names
// it. Run checks ctx between ops.
func Run(ctx context.Context, g *ir.Graph, feeds Feeds) (*Result, error) {
	return RunWith(ctx, g, feeds, Options{})
}

// RunKeep is Run keeping every value.
func RunKeep(ctx context.Context, g *ir.Graph, feeds Feeds) (*Result, error) {
	return RunWith(ctx, g, feeds, Options{KeepAll: true})
}

// RunWith is Run with options.
func RunWith(ctx context.Context, g *ir.Graph, feeds Feeds, opts Options) (*Result, error) {
	last := lastUses(g)
	r := &Result{Values: make([]*kernels.Tensor, len(g.Values)), Updates: Feeds{}}
	var pool buffers
	for i := range g.Values {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("interp: stopped before %s: %w", g.Values[i].Name, err)
		}
		t, err := evalValue(g, ir.ValueID(i), r.Values, feeds, &pool)
		if err != nil {
			return nil, err
		}
		r.Values[i] = t
		if opts.KeepAll {
			continue
		}
		for _, a := range g.Values[i].Args {
			if last[a] == ir.ValueID(i) {
				pool.put(g, a, r.Values[a])
				r.Values[a] = nil
			}
		}
		if last[i] == ir.ValueID(i) { // used by no op and not pinned
			pool.put(g, ir.ValueID(i), t)
			r.Values[i] = nil
		}
	}
	for _, o := range g.Outputs {
		r.Outputs = append(r.Outputs, r.Values[o.Value])
	}
	for _, u := range g.Updates {
		r.Updates[g.Values[u.Target].Name] = r.Values[u.Value]
	}
	return r, nil
}

// buffers recycles the storage of freed values: a value computed later with the same
// storage kind and element count reuses it, which saves the allocation and page faults
// that dominate memory-bound ops on large tensors. Only values the run computed go in;
// fed leaves belong to the caller.
type buffers struct {
	free map[[2]int][]*kernels.Tensor // by (storage kind, elements)
}

func bufferKey(t ir.Type) [2]int {
	kind := 0 // f32, f16, bf16 share float32 storage
	switch {
	case t.DType == ir.F64:
		kind = 1
	case !t.DType.IsFloat():
		kind = 2
	}
	return [2]int{kind, int(t.Shape.NumElements())}
}

func (b *buffers) put(g *ir.Graph, id ir.ValueID, t *kernels.Tensor) {
	if t == nil || g.Values[id].Op.IsLeaf() {
		return
	}
	if b.free == nil {
		b.free = map[[2]int][]*kernels.Tensor{}
	}
	k := bufferKey(t.Type)
	b.free[k] = append(b.free[k], t)
}

// get returns a recycled tensor retyped to t, or nil if none fits.
func (b *buffers) get(t ir.Type) *kernels.Tensor {
	k := bufferKey(t)
	list := b.free[k]
	if len(list) == 0 {
		return nil
	}
	x := list[len(list)-1]
	b.free[k] = list[:len(list)-1]
	x.Type = ir.Type{DType: t.DType, Shape: t.Shape.Clone()}
	return x
}

// lastUses gives, for every value, the ID of the last op that reads it: the value may be
// freed once that op has run. Outputs and update values never are (their entry is past
// the end), and neither are leaves, which belong to the caller.
func lastUses(g *ir.Graph) []ir.ValueID {
	last := make([]ir.ValueID, len(g.Values))
	for i := range g.Values {
		last[i] = ir.ValueID(i)
		for _, a := range g.Values[i].Args {
			last[a] = ir.ValueID(i)
		}
	}
	pin := ir.ValueID(len(g.Values))
	for _, o := range g.Outputs {
		last[o.Value] = pin
	}
	for _, u := range g.Updates {
		last[u.Value] = pin
	}
	return last
}

// evalValue computes or looks up value id.
func evalValue(g *ir.Graph, id ir.ValueID, vals []*kernels.Tensor, feeds Feeds, pool *buffers) (*kernels.Tensor, error) {
	v := &g.Values[id]
	if v.Op.IsLeaf() {
		return feed(v, feeds)
	}
	args := make([]*kernels.Tensor, len(v.Args))
	for j, a := range v.Args {
		if vals[a] == nil {
			panic(fmt.Sprintf("interp: operand %s of %s was freed before its last use", g.Values[a].Name, v.Name))
		}
		args[j] = vals[a]
	}
	if t := pool.get(v.Type); t != nil {
		if err := kernels.EvalInto(v.Op, v.Attrs, t, args); err != nil {
			return nil, ir.Errorf(v.Pos, "%s: %v", v.Name, err)
		}
		return t, nil
	}
	t, err := kernels.Eval(v.Op, v.Attrs, v.Type, args)
	if err != nil {
		return nil, ir.Errorf(v.Pos, "%s: %v", v.Name, err)
	}
	return t, nil
}

// feed returns the tensor fed for leaf v after checking its type and storage.
func feed(v *ir.Value, feeds Feeds) (*kernels.Tensor, error) {
	t, ok := feeds[v.Name]
	if !ok || t == nil {
		hint := ""
		if l, _ := v.Attrs.Get("limit"); v.Op == ir.OpInput && v.Type.DType.IsInt() && (l == nil || l == 0) {
			hint = " (random inputs need a limit attribute on integer inputs)"
		}
		return nil, ir.Errorf(v.Pos, "missing feed for %s %s of type %s%s", v.Op, v.Name, v.Type, hint)
	}
	if !t.Type.Equal(v.Type) {
		return nil, ir.Errorf(v.Pos, "feed for %s %s is %s, want %s", v.Op, v.Name, t.Type, v.Type)
	}
	if err := t.Check(); err != nil {
		return nil, ir.Errorf(v.Pos, "feed for %s %s: %v", v.Op, v.Name, err)
	}
	return t, nil
}

// Apply replaces each param and state in f by its value after the step r ran: one
// training step done. Tensors are shared with r, not copied; kernels never modify them.
func (f Feeds) Apply(r *Result) {
	for name, t := range r.Updates { // map to map: the order does not matter
		f[name] = t
	}
}
