// Package passes holds autopar's graph-to-graph phases: the functions the rows rebatch
// (Rebatch: the graph of one micro-batch), precision (ApplyPrecision: the forward in the
// compute dtype of --precision), autodiff (Autodiff: reverse-mode
// differentiation written into the same IR), optimizer (ApplyOptimizer: the parameter
// update of SGD or Adam, with f32 master weights under mixed precision) and cluster (ClusterLayers: Alpa's layer clustering) of the
// compiler's phase table call. The table itself is autopar.Phases in the root package,
// because its last rows (search, lower) need the oracle and codegen, which passes must not
// import; `autopar compile --dump PHASE` prints what any row produced. TrainingStep is
// Autodiff then ApplyOptimizer, for callers that want the step in one call. The
// intra-operator sharding pass is the subpackage passes/sharding.
//
// Autodiff writes the backward ops as ordinary ir ops, so that the intra-operator sharding
// pass later sees forward, backward and optimizer update as one graph and shards them
// together, as Alpa does. The gradient rules live here, in a table keyed by ir.Op
// (grad_rules*.go), not in the ir op table: ir stays free of any knowledge of
// differentiation, and a rule is written with the ir ops themselves. A new differentiable op
// is one row in ir plus its kernel plus one row here; the gradient test fails until that row
// and a test case for it exist.
//
// What is differentiated: float values on a path from a requested input (a param, usually)
// to the loss. Integer and bool operands — labels, indices, where's condition — carry no
// gradient by design. A float the loss depends on that was computed from a requested input
// through an op with no gradient (a compare whose result is cast back to float, an integer
// cast, a gradient op used in a forward graph) is an error positioned at that op.
//
// Decisions a reader of the rules should know: at a tie, max sends the whole gradient to
// its first operand, reduce_max splits it equally among the tied maxima, relu has slope 0 at
// 0 and max_pool follows the kernel's max_pool_grad; gelu is the exact erf form the kernels
// compute; cumsum's gradient is Σdy - cumsum(dy) + dy (ir has no reverse); dropout's is
// dropout of dy with the same seed and rate. The "autodiff" pass returns the gradients as
// extra outputs after the loss; "optimizer" takes them off again. Updates of f16 and bf16
// params are computed in f32 with f32 optimizer state.
//
// Errors and panics: a graph a user wrote that cannot be differentiated or stepped (no loss,
// a non-scalar loss, a non-differentiable use, a bad hyperparameter) is a positioned error.
// A gradient rule that builds an ill-typed op is a bug in this package and panics with a
// "passes:" message.
//
// Provenance: autodiff and the optimizer record in each value's ir.Prov what it is (the
// gradient, adjoint or rule temporary of a value; the state or update of a param), and
// every pass that copies a graph keeps it. Names like grad.w or w.m.next are for people:
// no package reads them to learn what a value is.
//
// passes must not call lp_solve directly, know about devices, parse value names for their
// meaning, or run kernels.
package passes
