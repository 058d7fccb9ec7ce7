package runtime

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// addPrograms: two replicas each load w and x, compute w + x and store it as w (on
// device 1 only when both store) and w + x summed as "loss"-like output "y" on device 0.
func addPrograms(bothStore bool) []*program.Program {
	f := typ(ir.F64, 2)
	var bs []*builder
	for d := range 2 {
		b := newBuilder(DeviceID(d))
		w := b.load("w", f)
		x := b.load("x", f)
		n := b.compute("w.next", f, ir.OpAdd, nil, w, x)
		if d == 0 || bothStore {
			b.store("w", n)
		}
		if d == 0 {
			b.store("y", x)
		}
		b.free(w, x, n)
		bs = append(bs, b)
	}
	return programs(bs)
}

// A Session keeps w on the devices when every device stores the block it loads, and on
// the host (assembled and fed back, as Run) when a device loads a block it did not store.
func TestSessionResidentAndHosted(t *testing.T) {
	f := typ(ir.F64, 2)
	w0 := kernels.FromF64(ir.F64, ir.Shape{2}, []float64{1, 2})
	x := kernels.FromF64(ir.F64, ir.Shape{2}, []float64{10, 20})
	for _, both := range []bool{true, false} {
		s, err := NewSession(addPrograms(both), Data{"w": w0}, Options{})
		require.NoError(t, err)
		if both {
			assert.Empty(t, s.Hosted())
		} else {
			assert.Equal(t, []string{"w"}, s.Hosted())
		}
		for range 2 {
			res, err := s.Step(context.Background(), Data{"x": x})
			require.NoError(t, err)
			assert.Equal(t, []float64{10, 20}, res.Stores["y"].Float64s())
			_, leaked := res.Stores["w"]
			assert.False(t, leaked, "w is not a result of the step")
			var feed int64
			for _, d := range res.Devices {
				feed += d.FeedBytes
			}
			want := 2 * x.Type.Bytes() // x on both devices
			if !both {
				want += 2 * f.Bytes() // and w, through the host
			}
			assert.Equal(t, want, feed, "both=%v", both)
		}
		got, err := s.Gather(context.Background())
		require.NoError(t, err)
		assert.Equal(t, []float64{21, 42}, got["w"].Float64s(), "both=%v", both)
	}
}

// fakeGroup runs a Session per device in one process, as MPI ranks would: each holds its
// device's blocks only, and Exchange meets the others at a barrier.
type fakeGroup struct {
	self   DeviceID
	shared *fakeShared
}

type fakeShared struct {
	mu        sync.Mutex
	cond      *sync.Cond
	t         *InProc
	parts     map[DeviceID]*DeviceResult
	round, in int
	out       []*DeviceResult
	n         int
}

func (g fakeGroup) Local(d DeviceID) bool { return d == g.self }
func (g fakeGroup) Lead() bool            { return g.self == 0 }
func (g fakeGroup) Begin(context.Context, Data) (Transport, error) {
	return g.shared.t, nil
}

func (g fakeGroup) Exchange(_ context.Context, mine []*DeviceResult) ([]*DeviceResult, error) {
	s := g.shared
	s.mu.Lock()
	defer s.mu.Unlock()
	round := s.round
	for _, r := range mine {
		s.parts[r.Stats.Device] = r
	}
	if s.in++; s.in == s.n {
		s.out = nil
		for d := range s.n {
			s.out = append(s.out, s.parts[DeviceID(d)])
		}
		s.parts, s.in = map[DeviceID]*DeviceResult{}, 0
		s.round++
		s.cond.Broadcast()
	}
	for s.round == round {
		s.cond.Wait()
	}
	return s.out, nil
}

// Over a group, each process's Session holds its own device's blocks, and every process
// gets the same results and the same gathered w as one Session of all devices.
func TestSessionGroup(t *testing.T) {
	w0 := kernels.FromF64(ir.F64, ir.Shape{2}, []float64{1, 2})
	x := kernels.FromF64(ir.F64, ir.Shape{2}, []float64{10, 20})
	sh := &fakeShared{t: NewInProc(devices(2)), parts: map[DeviceID]*DeviceResult{}, n: 2}
	sh.cond = sync.NewCond(&sh.mu)
	var wg sync.WaitGroup
	got := make([]Data, 2)
	errs := make([]error, 2)
	for d := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := NewGroupSession(addPrograms(true), Data{"w": w0}, Options{}, fakeGroup{DeviceID(d), sh})
			if err == nil && len(s.ResidentBytes()) != 1 {
				t.Errorf("device %d holds the blocks of %d devices", d, len(s.ResidentBytes()))
			}
			for i := 0; err == nil && i < 2; i++ {
				var res *Result
				if res, err = s.Step(context.Background(), Data{"x": x}); err == nil && len(res.Devices) != 2 {
					t.Errorf("device %d: counters of %d devices, want 2", d, len(res.Devices))
				}
			}
			if err == nil {
				got[d], err = s.Gather(context.Background())
			}
			errs[d] = err
		}()
	}
	wg.Wait()
	for d := range 2 {
		require.NoError(t, errs[d])
		assert.Equal(t, []float64{21, 42}, got[d]["w"].Float64s())
	}
}
