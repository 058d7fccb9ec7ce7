// Package ilp builds and solves small mixed-integer linear programs.
//
// It holds a plain-data model ([Problem]: binary, integer and continuous
// variables, linear rows, a linear objective to minimize), a solver backed by
// lp_solve 5.5 through a thin cgo binding ([Solve]), and an independent
// checker ([Evaluate]) that recomputes the objective and lists every violated
// row, bound and integrality requirement of any assignment, the solver's own
// included.
//
// The package knows variables and rows, nothing else: it must not import ir or
// passes, and it knows nothing of tensors, shardings or devices. Callers (the
// intra-operator sharding pass) translate their costs into a Problem and read
// the chosen strategies back from [Solution.Values], indexed by [VarID].
//
// Errors and panics: a malformed Problem (unknown variable, NaN or infinite
// coefficient, lo > hi, ...) is reported as an error by [Problem.Validate] and
// [Solve]; nothing in this package panics on user input. The solver's outcome
// is told by sentinel errors: [ErrInfeasible], [ErrUnbounded], [ErrTimeout]
// (possibly alongside a feasible but unproven solution), and the context's
// error when the context ends.
//
// Built without cgo (CGO_ENABLED=0), the package still compiles, so that what does not
// solve ILPs builds on its own; [Solve] and [Available] then return [ErrNoSolver].
package ilp
