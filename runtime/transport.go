package runtime

import (
	"context"
	"fmt"
	"strings"

	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// DeviceID numbers a device; it is codegen's (and mesh's) type.
type DeviceID = program.DeviceID

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
	Send(ctx context.Context, self, peer DeviceID, tag program.Tag, x *kernels.Tensor) (Traffic, error)
	// Recv returns what peer sent self under tag; transfers with equal (peer, tag) arrive in
	// the order they were sent.
	Recv(ctx context.Context, self, peer DeviceID, tag program.Tag) (*kernels.Tensor, Traffic, error)
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

// guarded runs each call of a Transport it does not trust to honour cancellation (any but
// InProc) on a goroutine of its own and stops waiting when the call's context ends: a
// transport that ignores ctx then costs a goroutine, abandoned where it blocks, instead of
// a run that never returns. The abandoned call's result, should it ever come, is dropped.
// A panic in the call is re-raised on the caller's goroutine, where the executor recovers
// it as the instruction's failure.
type guarded struct{ inner Transport }

// callResult is what one transport call returned, or the panic it raised.
type callResult struct {
	x        *kernels.Tensor
	traffic  Traffic
	err      error
	panicked any
}

// call runs f on its own goroutine and waits for it or for ctx, whichever ends first; on
// ctx's end it reports a *WaitError naming peers.
func (g guarded) call(ctx context.Context, peers []DeviceID, f func() (*kernels.Tensor, Traffic, error)) (*kernels.Tensor, Traffic, error) {
	done := make(chan callResult, 1) // buffered: an abandoned call still exits once f returns
	go func() {
		var r callResult
		defer func() {
			if p := recover(); p != nil {
				r.panicked = p
			}
			done <- r
		}()
		r.x, r.traffic, r.err = f()
	}()
	select {
	case r := <-done:
		if r.panicked != nil {
			panic(r.panicked)
		}
		return r.x, r.traffic, r.err
	case <-ctx.Done():
		return nil, Traffic{}, &WaitError{Peers: peers, Err: ctx.Err()}
	}
}

// others is group without self: the peers a collective waits for.
func others(self DeviceID, group []DeviceID) []DeviceID {
	out := make([]DeviceID, 0, len(group))
	for _, d := range group {
		if d != self {
			out = append(out, d)
		}
	}
	return out
}

func (g guarded) AllReduce(ctx context.Context, self DeviceID, group []DeviceID, x *kernels.Tensor) (*kernels.Tensor, Traffic, error) {
	return g.call(ctx, others(self, group), func() (*kernels.Tensor, Traffic, error) { return g.inner.AllReduce(ctx, self, group, x) })
}

func (g guarded) AllGather(ctx context.Context, self DeviceID, group []DeviceID, axis int, x *kernels.Tensor) (*kernels.Tensor, Traffic, error) {
	return g.call(ctx, others(self, group), func() (*kernels.Tensor, Traffic, error) {
		return g.inner.AllGather(ctx, self, group, axis, x)
	})
}

func (g guarded) ReduceScatter(ctx context.Context, self DeviceID, group []DeviceID, axis int, x *kernels.Tensor) (*kernels.Tensor, Traffic, error) {
	return g.call(ctx, others(self, group), func() (*kernels.Tensor, Traffic, error) {
		return g.inner.ReduceScatter(ctx, self, group, axis, x)
	})
}

func (g guarded) AllToAll(ctx context.Context, self DeviceID, group []DeviceID, split, concat int, x *kernels.Tensor) (*kernels.Tensor, Traffic, error) {
	return g.call(ctx, others(self, group), func() (*kernels.Tensor, Traffic, error) {
		return g.inner.AllToAll(ctx, self, group, split, concat, x)
	})
}

func (g guarded) Send(ctx context.Context, self, peer DeviceID, tag program.Tag, x *kernels.Tensor) (Traffic, error) {
	_, tr, err := g.call(ctx, []DeviceID{peer}, func() (*kernels.Tensor, Traffic, error) {
		tr, err := g.inner.Send(ctx, self, peer, tag, x)
		return nil, tr, err
	})
	return tr, err
}

func (g guarded) Recv(ctx context.Context, self, peer DeviceID, tag program.Tag) (*kernels.Tensor, Traffic, error) {
	return g.call(ctx, []DeviceID{peer}, func() (*kernels.Tensor, Traffic, error) { return g.inner.Recv(ctx, self, peer, tag) })
}
