//go:build !cgo

package ilp

// This file stands in for the lp_solve binding (lpsolve.go) when autopar is built without
// cgo. Everything that does not solve an ILP — the plan and program formats, the runtime,
// rendering — still builds and works; Solve returns ErrNoSolver, which says how to get the
// solver back, instead of the build failing with "undefined: lpModel".

import (
	"errors"
	"time"
)

// ErrNoSolver is returned by Solve in a build without cgo.
var ErrNoSolver = errors.New("ilp: this autopar was built without cgo (CGO_ENABLED=0), " +
	"and the sharding ILP is solved by lp_solve through cgo: install liblpsolve55-dev " +
	"and build with CGO_ENABLED=1")

// lp_solve's return codes, as in lp_lib.h, so that Solve's policy compiles unchanged.
const (
	lpNoMemory   = -2
	lpNumFailure = 5
	lpAccuracy   = 25
	lpOptimal    = 0
	lpSubopt     = 1
	lpInfeasible = 2
	lpUnbounded  = 3
	lpUserAbort  = 6
	lpTimeout    = 7
)

var lpCodeNames = map[int]string{}

type lpModel struct{ colExp []int }

func newLPModel(int) (*lpModel, error)                 { return nil, ErrNoSolver }
func (*lpModel) free()                                 {}
func (*lpModel) setColumn(int, Var) error              { return ErrNoSolver }
func (*lpModel) load([]Term)                           {}
func (*lpModel) setObjective([]Term) error             { return ErrNoSolver }
func (*lpModel) setRowMode(bool) error                 { return ErrNoSolver }
func (*lpModel) addRow(*Row) error                     { return ErrNoSolver }
func (*lpModel) solve(time.Duration, int64, int64) int { return lpNoMemory }
func (*lpModel) gaveUp() bool                          { return false }
func (*lpModel) exhausted() bool                       { return false }
func (*lpModel) cancel()                               {}
func (*lpModel) tune(tuning)                           {}
func (*lpModel) timedOut() bool                        { return false }
func (*lpModel) solutionCount() int                    { return 0 }
func (*lpModel) effort() (time.Duration, int64, int64) { return 0, 0, 0 }
func (*lpModel) variables() ([]float64, error)         { return nil, ErrNoSolver }
func (*lpModel) basis() *Basis                         { return nil }
func (*lpModel) setBasis(*Basis) error                 { return ErrNoSolver }
func (*lpModel) setCutoff(float64)                     {}

// Available reports whether this build can solve ILPs: ErrNoSolver without cgo.
func Available() error { return ErrNoSolver }
