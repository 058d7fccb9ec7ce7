package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// InProc is the in-process Transport: one mailbox per device, into which peers put copies of
// what they send, keyed by sender and transfer. Sends never block; a receive waits for its
// key. Collectives are built from one primitive, Exchange (every member gives block j to
// rank j; see collectives.go, which runtime/mpi shares):
//
//	all_gather      exchange x with everyone, concatenate in rank order
//	reduce_scatter  exchange the blocks of x along axis, sum what arrives in rank order
//	all_to_all      exchange the blocks of x along split, concatenate along concat
//	all_reduce      reduce_scatter over the flattened elements (chunk r = [r·L/n, (r+1)·L/n)),
//	                then all_gather of the summed chunks
//
// Every sum is the rank-order sum ((x₀ + x₁) + x₂) + … of the same operands on every rank,
// so results are bit-identical across ranks and equal the serial sum in that order.
//
// Traffic is what the exchanges move. With B the bytes of the tensor the group reduces or
// gathers (mesh.SentFraction's B), each device sends and receives exactly mesh.BytesSent when
// n divides the split: all-reduce 2(n−1)/n·B, all-gather and reduce-scatter (n−1)/n·B,
// all-to-all (n−1)/n²·B. When n does not divide an all-reduce's element count, chunks differ
// by one element and each device counts the chunks it actually moved.
type InProc struct {
	index map[DeviceID]int
	boxes []*mailbox
	// seq[i] counts the collectives device i has issued per group, so that the messages of
	// successive collectives on one group never match each other. Only device i touches it.
	seq []map[string]uint64
}

// NewInProc returns an in-process transport connecting the given devices.
func NewInProc(devices []DeviceID) *InProc {
	t := &InProc{index: make(map[DeviceID]int, len(devices))}
	for i, d := range devices {
		t.index[d] = i
		t.boxes = append(t.boxes, &mailbox{queue: map[msgKey][]*kernels.Tensor{}, wake: make(chan struct{})})
		t.seq = append(t.seq, map[string]uint64{})
	}
	return t
}

// msgKey identifies one message in a mailbox: who sent it and what it belongs to (a p2p tag,
// or a collective's group, sequence number and phase).
type msgKey struct {
	from  DeviceID
	tag   program.Tag
	group string
	seq   uint64
	phase uint8
}

type mailbox struct {
	mu    sync.Mutex
	queue map[msgKey][]*kernels.Tensor
	wake  chan struct{} // closed and replaced on every put: wakes the waiting owner
}

func (m *mailbox) put(k msgKey, x *kernels.Tensor) {
	m.mu.Lock()
	m.queue[k] = append(m.queue[k], x)
	close(m.wake)
	m.wake = make(chan struct{})
	m.mu.Unlock()
}

// take waits for a message under k. Only the mailbox's owner takes.
func (m *mailbox) take(ctx context.Context, k msgKey) (*kernels.Tensor, error) {
	for {
		m.mu.Lock()
		if q := m.queue[k]; len(q) > 0 {
			x := q[0]
			if len(q) == 1 {
				delete(m.queue, k)
			} else {
				m.queue[k] = q[1:]
			}
			m.mu.Unlock()
			return x, nil
		}
		wake := m.wake
		m.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (m *mailbox) has(k msgKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue[k]) > 0
}

func (t *InProc) box(d DeviceID) (*mailbox, error) {
	i, ok := t.index[d]
	if !ok {
		return nil, fmt.Errorf("device %d is not connected to this transport", d)
	}
	return t.boxes[i], nil
}

// Pending describes the messages sent but never received, sorted: after a run, anything here
// is a send without its recv.
func (t *InProc) Pending() []string {
	var out []string
	for to, b := range t.boxes {
		b.mu.Lock()
		for k, q := range b.queue {
			what := "tag " + k.tag.String()
			if k.group != "" {
				what = fmt.Sprintf("collective %d on group [%s]", k.seq, k.group)
			}
			out = append(out, fmt.Sprintf("device %d sent %d message(s) to device %d under %s that were never received",
				k.from, len(q), t.deviceAt(to), what))
		}
		b.mu.Unlock()
	}
	slices.Sort(out)
	return out
}

func (t *InProc) deviceAt(i int) DeviceID {
	for d, j := range t.index {
		if j == i {
			return d
		}
	}
	panic("runtime: mailbox without a device")
}

// Send implements Transport.
func (t *InProc) Send(_ context.Context, self, peer DeviceID, tag program.Tag, x *kernels.Tensor) (Traffic, error) {
	b, err := t.box(peer)
	if err != nil {
		return Traffic{}, err
	}
	b.put(msgKey{from: self, tag: tag}, x.Clone())
	return Traffic{Sent: tensorBytes(x)}, nil
}

// Recv implements Transport.
func (t *InProc) Recv(ctx context.Context, self, peer DeviceID, tag program.Tag) (*kernels.Tensor, Traffic, error) {
	b, err := t.box(self)
	if err != nil {
		return nil, Traffic{}, err
	}
	x, err := b.take(ctx, msgKey{from: peer, tag: tag})
	if err != nil {
		return nil, Traffic{}, &WaitError{Peers: []DeviceID{peer}, Err: err}
	}
	return x, Traffic{Received: tensorBytes(x)}, nil
}

// exchange is the one collective primitive: self gives out[j] to rank j of group and
// receives block self's rank from every member; in[r] is out[r] itself. phase tells apart
// the exchanges of one collective. The blocks travel uncopied: out[j] (j ≠ r) must be
// private to the call (no caller's buffer), and receivers only read them.
func (t *InProc) exchange(ctx context.Context, self DeviceID, group []DeviceID, seq uint64, phase uint8,
	out []*kernels.Tensor) ([]*kernels.Tensor, Traffic, error) {
	me := program.Rank(group, self)
	if me < 0 {
		return nil, Traffic{}, fmt.Errorf("group %v does not contain device %d", group, self)
	}
	key := msgKey{from: self, group: groupKey(group), seq: seq, phase: phase}
	var tr Traffic
	for j, d := range group {
		if j == me {
			continue
		}
		b, err := t.box(d)
		if err != nil {
			return nil, tr, err
		}
		b.put(key, out[j])
		tr.Sent += tensorBytes(out[j])
	}
	mine, err := t.box(self)
	if err != nil {
		return nil, tr, err
	}
	in := make([]*kernels.Tensor, len(group))
	in[me] = out[me]
	for j, d := range group {
		if j == me {
			continue
		}
		key.from = d
		if in[j], err = mine.take(ctx, key); err != nil {
			return nil, tr, &WaitError{Peers: t.missing(mine, key, group, in, me), Err: err}
		}
		tr.Received += tensorBytes(in[j])
	}
	return in, tr, nil
}

// missing lists the members whose block of an exchange has not arrived.
func (t *InProc) missing(box *mailbox, key msgKey, group []DeviceID, in []*kernels.Tensor, me int) []DeviceID {
	var ds []DeviceID
	for j, d := range group {
		key.from = d
		if j != me && in[j] == nil && !box.has(key) {
			ds = append(ds, d)
		}
	}
	return ds
}

// next returns self's sequence number for its next collective on group.
func (t *InProc) next(self DeviceID, group []DeviceID) uint64 {
	i, ok := t.index[self]
	if !ok {
		return 0 // exchange reports the unknown device
	}
	k := groupKey(group)
	s := t.seq[i][k]
	t.seq[i][k] = s + 1
	return s
}

func groupKey(group []DeviceID) string {
	var b strings.Builder
	for i, d := range group {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, d)
	}
	return b.String()
}

// exchanger is the Exchange of self's next collective on group.
func (t *InProc) exchanger(self DeviceID, group []DeviceID) Exchange {
	seq := t.next(self, group)
	return func(ctx context.Context, phase uint8, out []*kernels.Tensor) ([]*kernels.Tensor, Traffic, error) {
		return t.exchange(ctx, self, group, seq, phase, out)
	}
}

// AllGather implements Transport.
func (t *InProc) AllGather(ctx context.Context, self DeviceID, group []DeviceID, axis int, x *kernels.Tensor) (*kernels.Tensor, Traffic, error) {
	return ExchangeAllGather(ctx, t.exchanger(self, group), self, group, axis, x)
}

// ReduceScatter implements Transport.
func (t *InProc) ReduceScatter(ctx context.Context, self DeviceID, group []DeviceID, axis int, x *kernels.Tensor) (*kernels.Tensor, Traffic, error) {
	return ExchangeReduceScatter(ctx, t.exchanger(self, group), group, axis, x)
}

// AllToAll implements Transport.
func (t *InProc) AllToAll(ctx context.Context, self DeviceID, group []DeviceID, splitAxis, concatAxis int, x *kernels.Tensor) (*kernels.Tensor, Traffic, error) {
	return ExchangeAllToAll(ctx, t.exchanger(self, group), group, splitAxis, concatAxis, x)
}

// AllReduce implements Transport.
func (t *InProc) AllReduce(ctx context.Context, self DeviceID, group []DeviceID, x *kernels.Tensor) (*kernels.Tensor, Traffic, error) {
	return ExchangeAllReduce(ctx, t.exchanger(self, group), group, x)
}
