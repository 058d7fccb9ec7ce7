// Package plan is plan.json: the schema of a compiled training plan with its own structs
// (Plan, Stage, ValuePlan, Cost, ILPStats, Prediction, ...), ReadPlan and the checks of its
// meaning, the memory breakdown per device, and its lowering to programs (Plan.Programs,
// through codegen).
//
// A plan is plain data, written (WriteJSON) and read back byte for byte. ReadPlan checks
// what a hand-edited file can get wrong beyond its syntax (stages that overlap or share a
// device, an unknown schedule, in-flight counts the schedule does not imply, layouts no
// device can hold, a stage assignment codegen refuses) and rebuilds the training step of
// one micro-batch from the model text the plan carries, so a plan stands alone.
//
// plan must not know the search: it imports neither ilp nor passes/sharding nor dp, so
// render, the runtime and the CLI read plans without lp_solve or cgo (deps_test.go holds it
// to that). Its Cost and ILPStats copy the sharding pass's with the same JSON names, so that
// a field renamed in the search cannot change the file format. The root package autopar
// makes plans (Compile, which fills them from the search's results) and explains them.
package plan
