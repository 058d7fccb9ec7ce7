package autopar

import (
	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
	"github.com/autopar/autopar/plan"
)

// lowerable is the sharding pass's filter: it keeps the strategies codegen can lower.
func lowerable(lm *mesh.LogicalMesh) func(*ir.Graph, ir.ValueID, *sharding.Strategy) error {
	return func(g *ir.Graph, id ir.ValueID, s *sharding.Strategy) error {
		return codegen.CheckStrategy(g, id, s.In, plan.LocalOut(g, id, s.In, s.Out), lm)
	}
}
