// Package mpi runs autopar's per-device programs one OS process per device over Open MPI:
// launched by mpirun, rank r runs device r. It holds the cgo binding to the few MPI calls it
// needs (mpi.go), the runtime.Transport over them (transport.go), the message encoding
// (wire.go) and Session, which runs one step of a program set on every rank and gives every
// rank the assembled runtime.Result (session.go), and is the runtime.Group under a
// runtime.Session (an autopar.Trainer with TrainerOptions.Group) that keeps each rank's
// params and optimizer state on that rank between steps.
//
// The binding needs Open MPI's headers and library (Debian's libopenmpi-dev) and is built
// only with the build tag mpi (go build -tags mpi; the Makefile adds it where Open MPI is
// installed). Without the tag the package builds as a stub whose Init returns ErrNoMPI, so
// that `go build ./...` and `go test ./...` work where MPI is missing and nothing else in
// autopar needs cgo for it.
//
// The collectives are runtime's (runtime.ExchangeAllReduce and the others) over an
// exchange made of MPI point-to-point messages, so they sum in rank order exactly as the
// in-process transport does and give bit-identical results; every wait polls under its
// context, so a peer that never answers ends the wait with a runtime.WaitError naming it,
// and the caller aborts the job (World.Abort). It makes no plan decisions.
package mpi
