package autopar

import (
	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/mesh"
)

// Relaxed layer solves carried across micro-batch counts (issue 13, branch basis). A
// layer's relaxed ILP on one mesh at another count is nearly the same ILP — the shapes
// scale with the micro-batch, a few strategies come or go where a dimension stops
// dividing (Wide-ResNet-13B/64's layer 7 on 2×4: 15,791 against 15,811 variables) — so
// lp_solve starts it from the final basis of the last count's, mapped by name
// (sharding.Options.Carried). The start changes lp_solve's path only: the solve still
// proves the same optimum's cost.

// carryKey names a layer and mesh across counts: the stage's name, whether its ILP weighs
// its parts by the count (a first stage, hashAt's " B"), the submesh and logical shape.
type carryKey struct {
	name     string
	weighted bool
	sub      mesh.Submesh
	logical  mesh.LogicalShape
}

// carriedAt returns the basis kept for k; nil when none.
func (o *oracle) carriedAt(k carryKey) *ilp.NamedBasis {
	o.carriedMu.Lock()
	defer o.carriedMu.Unlock()
	return o.carried[k]
}

// keepCarried keeps b as k's latest basis.
func (o *oracle) keepCarried(k carryKey, b *ilp.NamedBasis) {
	o.carriedMu.Lock()
	defer o.carriedMu.Unlock()
	o.carried[k] = b
}
