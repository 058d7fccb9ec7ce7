// Package codegen turns a Plan into one Program per device, and defines that Program: the
// per-device instruction set the runtime executes.
//
// A Program is plain data: a list of buffer declarations (dense BufferIDs, each with the
// local shard type it holds, a readable name, and whether it is of the step or of one
// micro-batch), blocks of instructions, and a schedule of loops that runs the blocks —
// the step's once, the micro-batch blocks once per micro-batch, with the micro-batch index
// as the loop variable that selects their buffers, tags and input slices, so that a
// program's size does not grow with the micro-batch count. The instructions are —
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
// between stages so that each element crosses once, schedules the micro-batch blocks in
// loops in GPipe or 1F1B order with a deadlock check that does not expand them, accumulates gradients while they are still partial,
// runs the update once, and frees every buffer after its last use. Predict computes the
// bytes each device will move and hold under the runtime's own accounting; the tests hold
// the runtime to it exactly.
//
// codegen decides what runs where; it must not run anything.
package codegen
