// Package sharding is the intra-operator pass: for one logical device mesh it chooses how
// every op of a training step is split (Alpa, OSDI'22 §4) and predicts what that costs.
//
// The pass, file by file:
//
//   - strategy.go: every op gets its candidate strategies from one generic rule over its
//     einsum-style dims signature (ir.Dims): each mesh axis goes to at most one splittable
//     label (a label may take both axes, S01). The operand specs, the output spec, the
//     compute, communication and memory costs follow. special.go reads the rest from the
//     op's row of the ir op table (how a partial combines and whether codegen can finish
//     it, whether the op is heavy) and fixes a data input's non-batch dims. codegen reads
//     the same row, so every candidate offered here lowers (no filter between them).
//   - merge.go: followers (the rows marked Follower: elementwise, row-wise, reduction,
//     transpose, reshape and broadcast ops) are merged into their largest non-leaf
//     operand, Alpa's simplification: a follower takes the layout its leader produces, so
//     the ILP has one node per group rather than per op. A constant or iota read by one op
//     joins that op's group (fill), with its Pareto-optimal layouts.
//   - einsumcut.go: in attention's 4-D einsums and MoE's expert einsums an axis a batch
//     label can take splits no other label (not exact; Options.FullEinsums turns it off).
//   - dominance.go: exact dominance pruning of each node's strategies (own cost, memory,
//     the layouts read and the resharding of what it writes; Options.NoPrune).
//   - ilp.go and memory.go: the integer program — one-hot node variables, continuous edge
//     variables over distinct (producer spec, consumer spec) pairs, a per-device memory
//     budget over the liveness of values (of a recomputing stage's, in codegen's order,
//     under Options.Recompute) — solved with ilp.Solve.
//   - layers.go: identical repeated layers — the model blocks the graph marks (ir.Block) —
//     share their node variables, so a 48-layer transformer costs the ILP of about one
//     layer. A graph without marks is solved whole; names are never read.
//   - solve.go and result.go: Options, Candidates, Solve and the Result: a spec per value,
//     the chosen strategies, every collective, the predicted cost and peak memory.
//
// Partial sums never leave an op. A strategy that splits a contracted label (matmul's k,
// a reduced axis) pays, inside the op and in Alpa's style, either an all-reduce (the
// output is then whole on that axis) or a reduce-scatter onto one output dim (the output
// is then also split on that axis). Offering both keeps ZeRO-style plans reachable — a
// gradient reduce-scattered over the data axis, the update sharded, the parameter
// all-gathered — while every value the ILP prices is a plain, non-partial layout.
//
// The package knows graphs, meshes and the ILP model; it does not call lp_solve directly
// (package ilp does) and it does not run anything.
package sharding
