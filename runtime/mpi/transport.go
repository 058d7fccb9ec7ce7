//go:build mpi

package mpi

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/kernels"
)

// Transport is runtime.Transport over MPI for the device of this rank (device r is rank r
// of MPI_COMM_WORLD). Every collective runs on its group's own communicator, made once by
// NewTransport with MPI_Comm_create_group, and is built from runtime's Exchange primitive
// exactly as the in-process transport builds it, so the two give bit-identical results:
// the exchange is one MPI_Isend to and one MPI_Improbe/MPI_Mrecv from every other member.
// MPI's non-overtaking rule on (source, tag, communicator) keeps the successive collectives
// of one group apart without sequence numbers, because every member issues them in the same
// order. Point-to-point transfers run on a duplicate of MPI_COMM_WORLD under an MPI tag
// hashed from the program.Tag, which the message also carries: a message whose full tag is
// not the one awaited (a hash collision) is kept until its own Recv.
//
// Only one goroutine (the device's) may call it at a time.
type Transport struct {
	w     *World
	self  runtime.DeviceID
	comms map[string]comm // by group key
	p2p   comm
	// inflight are the sends not yet known complete; each call retires the finished ones.
	inflight []*sendReq
	// stash holds p2p messages received while waiting for another tag, by peer and tag.
	stash map[stashKey][]*kernels.Tensor
}

type stashKey struct {
	peer runtime.DeviceID
	tag  program.Tag
}

var _ runtime.Transport = (*Transport)(nil)

// NewTransport makes the transport of this rank's device for the programs: one communicator
// per distinct group that any collective of any program names. Every rank must call it with
// the same programs (Session checks that by hash first); groups are created in sorted order,
// which keeps MPI_Comm_create_group, collective over each group, free of deadlock.
func (w *World) NewTransport(programs []*program.Program) (*Transport, error) {
	t := &Transport{w: w, self: runtime.DeviceID(w.rank), comms: map[string]comm{}, stash: map[stashKey][]*kernels.Tensor{}}
	var err error
	if t.p2p, err = w.dupWorld(); err != nil {
		return nil, err
	}
	groups := map[string][]runtime.DeviceID{}
	for _, p := range programs {
		for _, in := range p.Instrs {
			if in.Kind.IsCollective() {
				groups[groupKey(in.Group)] = in.Group
			}
		}
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		g := groups[k]
		if program.Rank(g, t.self) < 0 {
			continue
		}
		ranks := make([]int, len(g))
		for j, d := range g {
			if int(d) < 0 || int(d) >= w.size {
				return nil, fmt.Errorf("mpi: group [%s] names device %d, but the job has %d ranks", k, d, w.size)
			}
			ranks[j] = int(d)
		}
		if t.comms[k], err = w.createGroup(ranks, i); err != nil {
			return nil, fmt.Errorf("mpi: communicator of group [%s]: %w", k, err)
		}
	}
	return t, nil
}

func groupKey(group []runtime.DeviceID) string {
	parts := make([]string, len(group))
	for i, d := range group {
		parts[i] = strconv.Itoa(int(d))
	}
	return strings.Join(parts, ",")
}

// exchanger is the runtime.Exchange of one collective on group.
func (t *Transport) exchanger(self runtime.DeviceID, group []runtime.DeviceID) (runtime.Exchange, error) {
	if self != t.self {
		return nil, fmt.Errorf("mpi: rank %d runs device %d, not device %d", t.w.rank, t.self, self)
	}
	me := program.Rank(group, self)
	c, ok := t.comms[groupKey(group)]
	if me < 0 || !ok {
		return nil, fmt.Errorf("mpi: no communicator for group [%s] on device %d: the group is not in the programs the transport was made for", groupKey(group), self)
	}
	return func(ctx context.Context, phase uint8, out []*kernels.Tensor) ([]*kernels.Tensor, runtime.Traffic, error) {
		return t.exchange(ctx, c, group, me, int(phase), out)
	}, nil
}

// exchange sends out[j] to member j and receives every member's block for self.
func (t *Transport) exchange(ctx context.Context, c comm, group []runtime.DeviceID, me, tag int, out []*kernels.Tensor) ([]*kernels.Tensor, runtime.Traffic, error) {
	var tr runtime.Traffic
	for j := range group {
		if j == me {
			continue
		}
		if err := t.send(c, j, tag, out[j], program.Tag{}); err != nil {
			return nil, tr, err
		}
		tr.Sent += out[j].Type.Bytes()
	}
	in := make([]*kernels.Tensor, len(group))
	in[me] = out[me]
	left := len(group) - 1
	err := poll(ctx, func() (bool, error) {
		for j := range group {
			if j == me || in[j] != nil {
				continue
			}
			data, ok, err := t.w.tryRecv(c, j, tag)
			if err != nil || !ok {
				if err != nil {
					return false, err
				}
				continue
			}
			x, _, err := decode(data)
			if err != nil {
				return false, fmt.Errorf("mpi: from device %d: %w", group[j], err)
			}
			in[j] = x
			tr.Received += x.Type.Bytes()
			left--
		}
		return left == 0, t.retire()
	})
	if err != nil {
		if ctx.Err() != nil {
			var missing []runtime.DeviceID
			for j, d := range group {
				if j != me && in[j] == nil {
					missing = append(missing, d)
				}
			}
			return nil, tr, &runtime.WaitError{Peers: missing, Err: ctx.Err()}
		}
		return nil, tr, err
	}
	return in, tr, nil
}

// send starts the transfer of x (with its p2p tag, if any) to rank dest of c.
func (t *Transport) send(c comm, dest, mpiTag int, x *kernels.Tensor, tag program.Tag) error {
	n := encodedSize(x, tag)
	buf, b := sendBuffer(n)
	encode(b, x, tag)
	s, err := t.w.isend(c, dest, mpiTag, buf, n)
	if err != nil {
		return err
	}
	t.inflight = append(t.inflight, s)
	return t.retire()
}

// retire forgets the sends that completed.
func (t *Transport) retire() error {
	keep := t.inflight[:0]
	for _, s := range t.inflight {
		ok, err := t.w.done(s)
		if err != nil {
			return err
		}
		if !ok {
			keep = append(keep, s)
		}
	}
	clear(t.inflight[len(keep):])
	t.inflight = keep
	return nil
}

// Flush waits until every send has completed (its buffer is MPI's no more). Call it at the
// end of a run, before the rank moves on.
func (t *Transport) Flush(ctx context.Context) error {
	err := poll(ctx, func() (bool, error) {
		err := t.retire()
		return len(t.inflight) == 0, err
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("mpi: device %d: %d send(s) not delivered: %w", t.self, len(t.inflight), err)
	}
	return err
}

// Unreceived describes what arrived but was never received: p2p messages kept for a tag
// no Recv asked for, and messages still waiting on the p2p communicator. Call it after a
// barrier that follows every rank's Flush.
func (t *Transport) Unreceived() ([]string, error) {
	var out []string
	for k, q := range t.stash {
		out = append(out, fmt.Sprintf("device %d sent %d message(s) to device %d under tag %s that were never received", k.peer, len(q), t.self, k.tag))
	}
	src, _, ok, err := t.w.probeAny(t.p2p)
	if err != nil {
		return nil, err
	}
	if ok {
		out = append(out, fmt.Sprintf("device %d sent a message to device %d that was never received", src, t.self))
	}
	slices.Sort(out)
	return out, nil
}

// mpiTag maps a p2p tag into MPI's tag range (0 to MPI_TAG_UB).
func (t *Transport) mpiTag(tag program.Tag) int {
	h := fnv.New32a()
	h.Write([]byte(tag.Value))
	h.Write([]byte{byte(tag.MicroBatch), byte(tag.MicroBatch >> 8), byte(tag.MicroBatch >> 16), byte(tag.MicroBatch >> 24)})
	return int(h.Sum32() % uint32(t.w.tagUB+1))
}

// Send implements runtime.Transport. It returns once MPI has the message; the buffer is
// freed when the send completes.
func (t *Transport) Send(_ context.Context, self, peer runtime.DeviceID, tag program.Tag, x *kernels.Tensor) (runtime.Traffic, error) {
	if self != t.self {
		return runtime.Traffic{}, fmt.Errorf("mpi: rank %d runs device %d, not device %d", t.w.rank, t.self, self)
	}
	if int(peer) < 0 || int(peer) >= t.w.size {
		return runtime.Traffic{}, fmt.Errorf("mpi: send to device %d, but the job has %d ranks", peer, t.w.size)
	}
	if err := t.send(t.p2p, int(peer), t.mpiTag(tag), x, tag); err != nil {
		return runtime.Traffic{}, err
	}
	return runtime.Traffic{Sent: x.Type.Bytes()}, nil
}

// Recv implements runtime.Transport.
func (t *Transport) Recv(ctx context.Context, self, peer runtime.DeviceID, tag program.Tag) (*kernels.Tensor, runtime.Traffic, error) {
	if self != t.self {
		return nil, runtime.Traffic{}, fmt.Errorf("mpi: rank %d runs device %d, not device %d", t.w.rank, t.self, self)
	}
	key := stashKey{peer, tag}
	if q := t.stash[key]; len(q) > 0 {
		x := q[0]
		if t.stash[key] = q[1:]; len(q) == 1 {
			delete(t.stash, key)
		}
		return x, runtime.Traffic{Received: x.Type.Bytes()}, nil
	}
	mt := t.mpiTag(tag)
	var x *kernels.Tensor
	err := poll(ctx, func() (bool, error) {
		for {
			data, ok, err := t.w.tryRecv(t.p2p, int(peer), mt)
			if err != nil || !ok {
				return false, errOr(err, t.retire())
			}
			y, got, err := decode(data)
			if err != nil {
				return false, fmt.Errorf("mpi: from device %d: %w", peer, err)
			}
			if got == tag {
				x = y
				return true, nil
			}
			k := stashKey{peer, got}
			t.stash[k] = append(t.stash[k], y)
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, runtime.Traffic{}, &runtime.WaitError{Peers: []runtime.DeviceID{peer}, Err: ctx.Err()}
		}
		return nil, runtime.Traffic{}, err
	}
	return x, runtime.Traffic{Received: x.Type.Bytes()}, nil
}

func errOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// AllReduce implements runtime.Transport (runtime.ExchangeAllReduce over MPI).
func (t *Transport) AllReduce(ctx context.Context, self runtime.DeviceID, group []runtime.DeviceID, x *kernels.Tensor) (*kernels.Tensor, runtime.Traffic, error) {
	ex, err := t.exchanger(self, group)
	if err != nil {
		return nil, runtime.Traffic{}, err
	}
	return runtime.ExchangeAllReduce(ctx, ex, group, x)
}

// AllGather implements runtime.Transport.
func (t *Transport) AllGather(ctx context.Context, self runtime.DeviceID, group []runtime.DeviceID, axis int, x *kernels.Tensor) (*kernels.Tensor, runtime.Traffic, error) {
	ex, err := t.exchanger(self, group)
	if err != nil {
		return nil, runtime.Traffic{}, err
	}
	return runtime.ExchangeAllGather(ctx, ex, self, group, axis, x)
}

// ReduceScatter implements runtime.Transport.
func (t *Transport) ReduceScatter(ctx context.Context, self runtime.DeviceID, group []runtime.DeviceID, axis int, x *kernels.Tensor) (*kernels.Tensor, runtime.Traffic, error) {
	ex, err := t.exchanger(self, group)
	if err != nil {
		return nil, runtime.Traffic{}, err
	}
	return runtime.ExchangeReduceScatter(ctx, ex, group, axis, x)
}

// AllToAll implements runtime.Transport.
func (t *Transport) AllToAll(ctx context.Context, self runtime.DeviceID, group []runtime.DeviceID, split, concat int, x *kernels.Tensor) (*kernels.Tensor, runtime.Traffic, error) {
	ex, err := t.exchanger(self, group)
	if err != nil {
		return nil, runtime.Traffic{}, err
	}
	return runtime.ExchangeAllToAll(ctx, ex, group, split, concat, x)
}
