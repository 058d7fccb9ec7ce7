// Package codegen turns a Plan into one Program per device, and defines that Program: the
// per-device instruction set the runtime executes.
//
// A Program is plain data: a list of buffer declarations (dense BufferIDs, each with the
// local shard type it holds and a readable name) and a list of instructions over them —
// compute (one ir op on local shards), constant, load and store (feeds and results, by
// block), accumulate, the collectives all_reduce, all_gather, reduce_scatter and
// all_to_all over device groups, send and recv between stages, and free. It has a readable
// text form (Program.String, one instruction per line), a stable JSON form with a version
// field (MarshalJSON / UnmarshalProgram) and a validator (Validate) that the runtime runs
// before executing anything.
//
// Lower makes the programs of a Plan: the step of one micro-batch, a mesh and the layouts
// of every value per stage. It checks every strategy (CheckStrategy, which the sharding
// pass also filters with), lowers resharding step by step into collectives, moves values
// between stages so that each element crosses once, unrolls the micro-batches in GPipe or
// 1F1B order with a deadlock check, accumulates gradients while they are still partial,
// runs the update once, and frees every buffer after its last use. Predict computes the
// bytes each device will move and hold under the runtime's own accounting; the tests hold
// the runtime to it exactly.
//
// codegen decides what runs where; it must not run anything.
package codegen
