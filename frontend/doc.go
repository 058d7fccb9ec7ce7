// Package frontend turns a model into an ir.Graph, the only thing it emits. There are two
// ways in, and they meet at ir.Graph.Append so that both run the op table's arity, attribute
// and shape rules and report mistakes the same way.
//
// The parser (Parse, ParseFile) reads the .ir text format that ir.Print writes: one
// statement a line, `#` comments, SSA in file order.
//
//	graph mlp
//	param w: f32[784,10] init="zeros"
//	input x: f32[32,784] batch=0
//	input y: i64[32] batch=0 limit=10
//	logits = matmul x, w
//	loss = sparse_cross_entropy logits, y
//	l = reduce_mean loss axes=[0]
//	output l
//	update w <- w.next
//
// A value a pass made (a training step printed by --dump) ends with its provenance, as
// ir.Print writes it: `grad.w = ... role=grad of=w`, `state w.m: f32[784,10] role=state
// of=w slot=m`. of= may name a later value, so it is resolved with the outputs at the end.
//
// Every user mistake — a malformed line, an unknown op or attribute, a wrong arity, a shape
// mismatch, an undefined, duplicate or later-defined name, a bad type — is an *ir.Error in an
// ir.ErrorList, printed as file:line:col: message, positioned on the token at fault, with
// notes ("first defined here") and "did you mean" hints where they help. The parser keeps
// going after a bad line (up to ten errors) but never returns a partial graph, and it never
// panics on any input: FuzzParse holds it to that and to the round trip
// Print(Parse(Print(g))) == Print(g). The lexer works line by line on byte slices, so a
// GPT-39B file parses without a regexp or a string per token.
//
// The builder (NewBuilder, Builder, Value) records a graph from Go code, one method call per
// op, positioned at the calling line; errors stick, bufio.Scanner-style, and Build returns
// the first.
//
// The model zoo (package frontend/zoo) uses the builder to make the benchmark models —
// MLP, GPT, mixture-of-experts and Wide-ResNet at Alpa's sizes — whose printed forms live
// in the repository's testdata/models.
//
// frontend knows nothing of devices, meshes, costs or passes: it must not emit anything but
// an ir.Graph.
package frontend
