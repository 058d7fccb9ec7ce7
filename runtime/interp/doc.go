// Package interp is autopar's serial reference interpreter: it runs an ir.Graph op by op
// on one machine with the shared tensor kernels (runtime/kernels). It is the reference the
// parallel runtime is checked against, and the engine of autodiff's finite-difference
// tests, so it favours being obviously right over being fast: no fusion, no reordering,
// only freeing values after their last use.
//
// It also makes the data a run needs: parameters initialized as each param's init attr
// says and random inputs, both deterministic per (seed, value name) so that adding or
// reordering params does not change the others.
//
// The package knows graphs and tensors, not devices, plans or programs.
package interp
