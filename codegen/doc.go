// Package codegen turns a Plan into one program.Program per device (package program
// defines the instruction set, its text and JSON forms, validation and the schedule
// loops).
//
// Lower makes the programs of a Plan: the step of one micro-batch, a mesh and the layouts
// of every value per stage. It checks every strategy (CheckStrategy, which reads the op's
// row of the ir op table, as the sharding pass does, so that every candidate the pass offers
// passes), lowers resharding step by step into collectives, moves values
// between stages so that each element crosses once, schedules the micro-batch blocks in
// loops in GPipe or 1F1B order (program.StageLoops) with a deadlock check that does not
// expand them, accumulates gradients while they are still partial, runs the update once,
// and frees every buffer after its last use. A stage marked Recompute keeps only its
// received inputs (and checkpoints between its segments) from a micro-batch's forward to
// its backward and runs the forward ops its backward needs again in the backward, a
// segment just before its first backward use (remat.go). Two ops on a split dim lower to
// several instructions: gather on a shard of its table's rows (a masked lookup,
// gatherShard) and batch_norm on a shard of its batch (synchronized statistics,
// batchNormSync). Predict computes the bytes each device will
// move and hold under the runtime's own accounting; the tests hold the runtime to it
// exactly.
//
// codegen decides what runs where; it must not run anything.
package codegen
