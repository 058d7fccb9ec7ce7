package sharding

import (
	"reflect"
	"slices"
	"sync"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// Searches of MemoryBoundUntil kept between calls (issue 13, round eleven, branch lagmulti).
//
// The root asks a whole-network range's memory bound up to a target and, when a later
// target asks more of a search that stopped at the old one, asks again (timefloor.go,
// lagRefute). Each call used to build the planner and solve the free energy again, and
// restart the multiplier search from the free solve's messages: on GPT-6.7B/16 ten of its
// eighteen searches were such re-runs. A search stopped where its enough held is kept
// instead, planner, free solve and lagSearcher (its solver's messages, points and
// multiplier), in the CandidateMemo the options carry (one per oracle, so a search lives
// no longer than the solves that share its candidates), and the next call for the same
// problem goes on from where it stopped. The bound of any multiplier and any messages is a
// bound (lagrange.go), so a search gone on is as sound as one begun anew; it is the same
// search as one asked once for the higher target.

// lagKeepSize bounds the searches a CandidateMemo keeps, dropping the oldest: GPT-6.7B/16
// resumes its whole network on four meshes at two micro-batch counts.
const lagKeepSize = 8

// lagKeep holds the searches stopped at their callers' targets. The zero value is ready.
type lagKeep struct {
	mu   sync.Mutex
	ents []*lagKept
}

// lagKept is one stopped search: the problem it solves (graph, mesh and options, the
// options' slices, maps and pointers by identity), what the free solve proved, and the
// search itself.
type lagKept struct {
	g    *ir.Graph
	lm   *mesh.LogicalMesh
	opts Options
	p    *planner
	free FreeDual
	q    *lagSearcher
}

// take removes and returns the kept search of (g, lm, opts) that stopped at multiplier
// from (the MemoryDual.Mu its call returned), or nil.
func (k *lagKeep) take(g *ir.Graph, lm *mesh.LogicalMesh, opts Options, from float64) *lagKept {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, e := range k.ents {
		if e.same(g, lm, opts) {
			k.ents = slices.Delete(k.ents, i, i+1)
			if e.q.res.mu != from {
				return nil // the caller asks for another search: this one is stale
			}
			return e
		}
	}
	return nil
}

// put keeps e, dropping the oldest beyond lagKeepSize.
func (k *lagKeep) put(e *lagKept) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ents = slices.DeleteFunc(k.ents, func(o *lagKept) bool { return o.same(e.g, e.lm, e.opts) })
	if len(k.ents) >= lagKeepSize {
		k.ents = slices.Delete(k.ents, 0, len(k.ents)-lagKeepSize+1)
	}
	k.ents = append(k.ents, e)
}

// same reports whether e solves g on lm under opts: the same graph, a mesh of the same
// shape, devices and link prices, and options equal field by field, their slices, maps,
// pointers and functions the same objects (a caller that changes one in place between
// calls asks for a new search; none does: the root's come from its stage graphs).
func (e *lagKept) same(g *ir.Graph, lm *mesh.LogicalMesh, opts Options) bool {
	return e.g == g && e.lm.Shape == lm.Shape && e.lm.Alpha == lm.Alpha && e.lm.Beta == lm.Beta &&
		slices.Equal(e.lm.Devices, lm.Devices) && sameRefs(reflect.ValueOf(e.opts), reflect.ValueOf(opts))
}

// sameRefs compares a and b (of one type) by value where they hold plain values and by
// identity where they refer to something (a function only when both are nil).
func sameRefs(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			if !sameRefs(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Array:
		for i := range a.Len() {
			if !sameRefs(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		return a.IsNil() == b.IsNil() && a.Len() == b.Len() && a.Pointer() == b.Pointer()
	case reflect.Map, reflect.Pointer, reflect.Chan, reflect.UnsafePointer:
		return a.Pointer() == b.Pointer()
	case reflect.Func:
		return a.IsNil() && b.IsNil()
	case reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return a.Elem().Type() == b.Elem().Type() && sameRefs(a.Elem(), b.Elem())
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	case reflect.Complex64, reflect.Complex128:
		return a.Complex() == b.Complex()
	case reflect.String:
		return a.String() == b.String()
	}
	return false
}
