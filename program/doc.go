// Package program defines the Program: the per-device instruction set the runtime executes
// and codegen emits. It is plain data with no search and no cgo, so render, the runtime
// and the CLI read programs without pulling in the compiler.
//
// A Program is a list of buffer declarations (dense BufferIDs, each with the local shard
// type it holds, a readable name, and whether it is of the step or of one micro-batch),
// blocks of instructions, and a schedule of loops that runs the blocks — the step's once,
// the micro-batch blocks once per micro-batch, with the micro-batch index as the loop
// variable that selects their buffers, tags and input slices, so that a program's size
// does not grow with the micro-batch count. The instructions are compute (one ir op on
// local shards), constant, load and store (feeds and results, by block), accumulate, the
// collectives all_reduce, all_gather, reduce_scatter and all_to_all over device groups,
// send and recv between stages, and free. It has a readable text form (Program.String,
// one instruction per line), a stable JSON form with a version field (MarshalJSON /
// UnmarshalProgram) and a validator (Validate) that the runtime runs before executing
// anything.
//
// Schedule is autopar's one pipeline-schedule enum (its zero value is OneFOneB, the CLI's
// default); StageLoops is the task order of stage i under it, over the blocks every
// lowered program has (BlockPrologue, BlockForward, BlockBackward, BlockUpdate). codegen
// emits these loops, dp sizes stages by the schedule, and render draws the same order.
//
// program must not know plans, costs or the search: it imports only ir and mesh.
package program
