package ir

import (
	"fmt"
	"math"
)

// Block is the repeated block of the model a value belongs to: one transformer layer, one
// MoE layer, one residual block. Whoever builds the graph sets it (frontend.Builder.Block,
// block=N in the .ir text); a pass that derives a value from another puts it in that
// value's block (SetDerived): the gradient, adjoints, rule temporaries, optimizer state and
// update of a value in block i are in block i, and so are the casts the precision pass
// inserts and the input a pipeline stage reads another stage's value through. The sharding
// pass ties identical blocks through it (passes/sharding/layers.go), never through names.
//
// Blocks are numbered from 1 in model order (the zoo's l0 is block 1); only equality
// matters. NoBlock, the zero value, is a value of no block: the embedding, the loss, and
// every value of a graph whose builder marked none.
type Block int32

// NoBlock is the Block of a value in no repeated block.
const NoBlock Block = 0

// MaxBlock is the largest block number the text format takes.
const MaxBlock = math.MaxInt32

// BlockAttr is the name the text format writes a value's block under, after its
// attributes: block=3. No op has an attribute of that name; a value of no block writes none.
const BlockAttr = "block"

// SetDerived gives value id provenance p and puts it in the block of p.Of, the value it is
// derived from (NoBlock when p names none): what autodiff and the optimizer call for every
// value they make. It panics if id is out of range.
func (g *Graph) SetDerived(id ValueID, p Prov) {
	v := g.Value(id)
	v.Prov, v.Block = p, NoBlock
	if of, ok := p.OfValue(); ok && int(of) < len(g.Values) {
		v.Block = g.Values[of].Block
	}
}

// Blocks returns every value's block, indexed by ValueID, and whether any value has one.
func (g *Graph) Blocks() ([]Block, bool) {
	out, any := make([]Block, len(g.Values)), false
	for i := range g.Values {
		out[i] = g.Values[i].Block
		any = any || out[i] != NoBlock
	}
	return out, any
}

// CheckBlock says what is wrong with block number b, or nil.
func CheckBlock(b int64) error {
	if b < 1 || b > MaxBlock {
		return fmt.Errorf("block %d is out of range: blocks are numbered from 1 to %d (leave block= out for a value in no block)", b, MaxBlock)
	}
	return nil
}

// verifyBlock checks that a value's block is NoBlock or a valid block number.
func verifyBlock(g *Graph, id ValueID) *Error {
	v := &g.Values[id]
	if v.Block == NoBlock {
		return nil
	}
	if err := CheckBlock(int64(v.Block)); err != nil {
		return Errorf(v.Pos, "%s: %v", v.Name, err)
	}
	return nil
}
