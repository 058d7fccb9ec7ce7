// Package autopar is the library facade of the autopar compiler: the calls a Go training
// program makes.
//
//	g, _ := frontend.ParseFile("gpt.ir")            // or a graph built with frontend.NewBuilder
//	c, _ := mesh.ParseCluster("cpu:4")
//	plan, err := autopar.Compile(ctx, g, c, autopar.Options{})
//	progs, err := plan.Programs()                   // one per device
//	plan.WriteJSON(w)                               // plan.json, byte-identical for the same input
//
// The compiler is one ordered table, Phases (phases.go), as in the Go compiler's SSA
// backend; every row has a name, the phases it requires (checked at init), a dump and a
// verifier:
//
//	verify     the forward graph's invariants (ir.Verify)                  once
//	rebatch    the graph of one micro-batch (passes.Rebatch)               per micro-batch count
//	precision  its forward in the compute dtype (passes.ApplyPrecision)    per count
//	autodiff   the backward ops (passes.Autodiff)                          per count
//	optimizer  the update of every param: the training step                per count
//	cluster    Alpa's layer clustering (passes.ClusterLayers)              per count
//	search     the stage–submesh DP (dp.Solve) priced by the sharding      per count
//	           ILPs of each candidate stage (oracle.go, passes/sharding):
//	           the plan
//	lower      one program per device (codegen.Lower)                      the fastest plan
//
// The phases act on one Compilation (the graph, the micro-batch graph, the step, the
// layering, the search result, the plan, the programs): each reads what the rows before it
// set and sets its own field. Compile runs the table up to search and returns the plan with
// the shortest step time: stages, submeshes, logical meshes, the sharding of every value,
// and what it predicts (step time split into compute, communication and pipeline bubble,
// memory per device, throughput). Plan.Programs is the lower phase; Run runs every row
// with a hook after each (what `autopar compile --dump`, `--time` and `--check` use). A
// new phase is a new row.
//
// The package holds orchestration only; every decision is made by the package that owns
// it, and this one must not duplicate their logic.
package autopar
