package runtime

import (
	"context"
	"fmt"
	"strings"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/runtime/kernels"
)

// DeviceID numbers a device; it is codegen's (and mesh's) type.
type DeviceID = codegen.DeviceID

// Transport carries the collectives and the point-to-point transfers of the programs. Every
// method is called by the device self with its own local tensor, as an MPI rank calls into
// its communicator: the executor shares no memory between devices, so a multi-process
// implementation (one rank per device, launched by mpirun) can replace the in-process one
// without changing programs or the executor.
//
// Contract, for every implementation:
//   - group lists the members in rank order and contains self; every member calls the same
//     collective on the same group in the same relative order, as in MPI;
//   - the result is a new tensor owned by the caller, and x is not retained: a transport that
//     delivers x later must copy it first;
//   - sums run in rank order, ((x₀ + x₁) + x₂) + …, with the op add of package kernels
//     (so f16 and bf16 round after every add), and every rank receives bit-identical sums;
//   - Traffic reports what self actually sent and received, in bytes of the dtype's size;
//   - a wait that ctx ends returns a *WaitError naming the peers not yet heard from.
//
// A method's errors other than *WaitError are the caller's mistakes (a shape the group cannot
// split, say) and name what was wrong.
type Transport interface {
	// AllReduce returns the sum over group of every member's x (all of one type).
	AllReduce(ctx context.Context, self DeviceID, group []DeviceID, x *kernels.Tensor) (*kernels.Tensor, Traffic, error)
	// AllGather returns every member's x concatenated along axis in rank order.
	AllGather(ctx context.Context, self DeviceID, group []DeviceID, axis int, x *kernels.Tensor) (*kernels.Tensor, Traffic, error)
	// ReduceScatter returns block r (self's rank) along axis of the sum over group of x.
	ReduceScatter(ctx context.Context, self DeviceID, group []DeviceID, axis int, x *kernels.Tensor) (*kernels.Tensor, Traffic, error)
	// AllToAll splits x along split into len(group) blocks, gives block j to rank j, and
	// returns the blocks self receives concatenated along concat in rank order.
	AllToAll(ctx context.Context, self DeviceID, group []DeviceID, split, concat int, x *kernels.Tensor) (*kernels.Tensor, Traffic, error)
	// Send gives a copy of x to peer under tag. It may return before peer receives.
	Send(ctx context.Context, self, peer DeviceID, tag codegen.Tag, x *kernels.Tensor) (Traffic, error)
	// Recv returns what peer sent self under tag; transfers with equal (peer, tag) arrive in
	// the order they were sent.
	Recv(ctx context.Context, self, peer DeviceID, tag codegen.Tag) (*kernels.Tensor, Traffic, error)
}

// Traffic is the bytes one device moved in one call.
type Traffic struct {
	Sent, Received int64
}

// WaitError is a wait that ended (a timeout, a cancellation) before the peers it names
// delivered. Err is the context's error.
type WaitError struct {
	Peers []DeviceID
	Err   error
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("%v waiting for %s", e.Err, devicesString(e.Peers))
}

func (e *WaitError) Unwrap() error { return e.Err }

// devicesString names devices for a message: "device 3", "devices 1, 2".
func devicesString(ds []DeviceID) string {
	if len(ds) == 0 {
		return "peers"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprint(d)
	}
	if len(ds) == 1 {
		return "device " + parts[0]
	}
	return "devices " + strings.Join(parts, ", ")
}
