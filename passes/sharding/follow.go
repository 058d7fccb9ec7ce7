package sharding

import "github.com/autopar/autopar/ir"

// MayFollow reports whether an op of this kind may be merged into its operand's ILP node
// (see isFollowerOp). The fast search's composition (autopar's compose.go) is exact only
// where no such op reads a value across a layer boundary: there the range's ILP and the
// layer's own ILP merge differently.
func MayFollow(op ir.Op) bool { return isFollowerOp(op) }
