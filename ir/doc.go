// Package ir holds autopar's tensor IR: dtypes, shapes, the closed op table, the SSA Graph,
// its verifier and its printer.
//
// A Graph is a list of Values in topological order; each Value is produced by one op from
// earlier Values. Every op is one row of the op table (see OpDef): its name, arity,
// attributes, shape rule, einsum-style dims signature and FLOP count. Everything downstream —
// the parser, the builder, autodiff, the sharding strategies, the layer clustering, codegen,
// the interpreter — reads the row rather than switching over ops. The row also holds the
// facts the parallelizer needs beyond the dims signature: how partial results combine
// (Partial: none, sum or max; Partial.Lowerable says which the program's collectives finish),
// whether the op is Heavy (counted by clustering, never replicated under Alpa's cost
// convention) and whether it is a Follower (merged into its operand by the sharding ILP). A
// new op is its constant and row (table.go), its kernel and, if differentiable, its
// gradient rule.
//
// A Value also carries its provenance (Prov): what a training step's pass made it as — the
// gradient of a param, an adjoint, optimizer state, an update op — and of which value. The
// passes set it; everything downstream reads it instead of the value's name. And it
// carries its Block: which repeated block of the model (a transformer layer, an MoE layer)
// it belongs to, set by whoever builds the graph and inherited by everything a pass derives
// from it (Graph.SetDerived). The sharding pass ties identical blocks through it. Names are
// for people: no package parses them to learn what a value is or where it belongs.
//
// ir knows nothing about devices, meshes or costs beyond FLOPs.
//
// Errors and panics: mistakes a user can make (a shape mismatch, a bad attribute, an undefined
// name) come back as *Error values carrying a source position. A broken internal invariant —
// an out-of-range ValueID, an attribute read with the wrong type after verification —
// panics with an "ir:" message; functions that can panic say so.
package ir
