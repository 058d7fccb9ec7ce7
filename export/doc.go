// Package export hands a compiled plan to the frameworks its users train with: a Python
// module of jax.sharding meshes and PartitionSpecs (JAX), a Python module of DeviceMeshes
// and DTensor placements (PyTorch), or the launch arguments of Megatron-LM when the plan
// is one Megatron can run, and otherwise an error naming every part it cannot.
//
// It reads a Plan of its own, plain data (stages, their logical meshes and devices, and
// each value's role, type and spec), which the root package builds from a plan.json
// (autopar.Plan.Export). It imports mesh for specs and their notations, and must not
// import the search, the ILP or anything that needs cgo: exporting a plan must not need
// lp_solve.
//
// Every exporter writes the same bytes for the same plan: values in the plan's order,
// nothing ranged over a map.
package export
