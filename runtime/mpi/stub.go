//go:build !mpi

package mpi

import (
	"context"
	"errors"

	"github.com/autopar/autopar/program"
)

// ErrNoMPI is what this build answers: it was built without Open MPI.
var ErrNoMPI = errors.New("mpi: autopar was built without MPI: install Open MPI (make deps) and build with -tags mpi (make build does)")

// Available reports whether this build links Open MPI (it was built with -tags mpi).
func Available() bool { return false }

// World is this process's MPI library; without MPI there is none.
type World struct{}

// Init returns ErrNoMPI.
func Init() (*World, error) { return nil, ErrNoMPI }

// Rank is 0.
func (w *World) Rank() int { return 0 }

// Size is 1.
func (w *World) Size() int { return 1 }

// Finalize does nothing.
func (w *World) Finalize() error { return nil }

// Abort does nothing here; nothing can have started.
func (w *World) Abort(code int) {}

// Barrier returns ErrNoMPI.
func (w *World) Barrier(ctx context.Context) error { return ErrNoMPI }

// Bcast returns ErrNoMPI.
func (w *World) Bcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	return nil, ErrNoMPI
}

// Allgather returns ErrNoMPI.
func (w *World) Allgather(ctx context.Context, data []byte) ([][]byte, error) {
	return nil, ErrNoMPI
}

func (w *World) newTransport(programs []*program.Program) (rankTransport, error) {
	return nil, ErrNoMPI
}
