package runtime

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// Session runs the same programs step after step, keeping the tensors that persist between
// steps (a training step's params and optimizer state) on the devices: each device holds
// the blocks its programs store of them, and its loads of them in the next step slice its
// own blocks instead of a feed. A step then takes only the data inputs from the host and
// hands back only the other stores (the loss); Gather assembles the resident tensors on
// demand.
//
// codegen stores an updated param or state on every device that loads it next step, in
// the layout it loads it in, so every load of a persistent tensor lies inside a block its
// own device stored. Programs that do not (hand-written ones, or saved by an older
// codegen) still run: a name some load of which lies inside no block of its own device is
// kept on the host instead, assembled from the stores after each step and fed to the next,
// as Run does. Hosted returns those names; their bytes show in DeviceStats.FeedBytes and
// StoreBytes.
//
// With a Group (NewGroupSession), this process runs only its own devices' programs, the
// group's other processes the rest; each holds its own devices' blocks, and only the
// stores that are not resident (and Gather's blocks) cross between the processes.
//
// A Session is not safe for concurrent use.
type Session struct {
	progs []*program.Program
	opts  Options
	group Group
	local []int           // indices of the programs this process runs
	names map[string]bool // every resident or hosted name
	// blocks[i] holds program i's resident blocks by name (local programs only).
	blocks []map[string][]storeRec
	host   Data // the hosted names' full tensors
}

// Group is how a Session works with the other processes that run the rest of the programs,
// one device per process (runtime/mpi implements it over Open MPI). Every process of the
// group makes the same calls in the same order.
type Group interface {
	// Local reports whether this process runs device d.
	Local(d DeviceID) bool
	// Lead reports whether this process is the one that writes what the group shares
	// (a checkpoint): exactly one process of the group is.
	Lead() bool
	// Begin starts a step with data, the host's feeds of the step (every process must pass
	// the same), once every process is ready, and returns the transport of the step.
	Begin(ctx context.Context, data Data) (Transport, error)
	// Exchange gives every process every device's result, in the order of the programs,
	// from each process's own devices' results; after a step it also checks that every
	// send was received.
	Exchange(ctx context.Context, mine []*DeviceResult) ([]*DeviceResult, error)
}

// NewSession validates the programs and places the initial tensors: every name in init is
// one the programs load and store (a persistent tensor), whole; each device takes the
// blocks it stores of it. The names of init must be exactly the names both loaded and
// stored by the programs; another name, a missing one or a wrong type is an error naming
// it. The tensors are copied.
func NewSession(programs []*program.Program, init Data, opts Options) (*Session, error) {
	return NewGroupSession(programs, init, opts, nil)
}

// NewGroupSession is NewSession for this process's devices of group (nil: all of them).
// Every process passes the same programs and init.
func NewGroupSession(programs []*program.Program, init Data, opts Options, group Group) (*Session, error) {
	if err := checkPrograms(programs); err != nil {
		return nil, err
	}
	loaded, stored := map[string]ir.Type{}, map[string]ir.Type{}
	for _, p := range programs {
		for i := range p.Instrs {
			in := &p.Instrs[i]
			switch in.Kind {
			case program.Load:
				loaded[in.Name] = p.Buffers[in.Out].Type
			case program.Store:
				stored[in.Name] = in.Full
			}
		}
	}
	s := &Session{progs: programs, opts: opts, group: group, names: map[string]bool{}, host: Data{}}
	for _, name := range slices.Sorted(maps.Keys(init)) {
		x := init[name]
		full, ok := stored[name]
		if _, ld := loaded[name]; !ok || !ld {
			return nil, fmt.Errorf("runtime: session: %s is not both loaded and stored by the programs, expected a param or state of the step", name)
		}
		if x == nil || !x.Type.Equal(full) {
			return nil, fmt.Errorf("runtime: session: %s is %v, expected %s", name, typeOf(x), full)
		}
		if err := x.Check(); err != nil {
			return nil, fmt.Errorf("runtime: session: %s: %w", name, err)
		}
		s.names[name] = true
	}
	for name := range stored {
		if _, ld := loaded[name]; ld && !s.names[name] {
			return nil, fmt.Errorf("runtime: session: the programs load and store %s, expected its initial value", name)
		}
	}
	for i, p := range programs {
		if group == nil || group.Local(p.Device) {
			s.local = append(s.local, i)
		}
	}
	if len(s.local) == 0 {
		return nil, fmt.Errorf("runtime: session: the group runs none of the %d programs' devices in this process", len(programs))
	}
	// Which names stay resident is decided from every program, so that every process of a
	// group decides the same.
	hosted := map[string]bool{}
	for _, p := range programs {
		own := map[string][][2][]int{} // name -> (offsets, extent) of the device's stores
		for k := range p.Instrs {
			in := &p.Instrs[k]
			if in.Kind == program.Store && s.names[in.Name] {
				own[in.Name] = append(own[in.Name], [2][]int{in.Offsets, p.Buffers[in.Args[0]].Type.Shape})
			}
		}
		for k := range p.Instrs {
			in := &p.Instrs[k]
			if in.Kind == program.Load && s.names[in.Name] && !covered(own[in.Name], in, p.Buffers[in.Out].Type.Shape) {
				hosted[in.Name] = true
			}
		}
	}
	for name := range hosted {
		s.host[name] = init[name].Clone()
	}
	s.blocks = make([]map[string][]storeRec, len(programs))
	for _, i := range s.local {
		p := programs[i]
		s.blocks[i] = map[string][]storeRec{}
		for k := range p.Instrs {
			in := &p.Instrs[k]
			if in.Kind == program.Store && s.names[in.Name] && !hosted[in.Name] {
				ext := p.Buffers[in.Args[0]].Type.Shape
				blk, err := sliceBlock(init[in.Name], in.Offsets, ext)
				if err != nil {
					return nil, ir.Errorf(p.Pos(k), "store of %s: %v", in.Name, err)
				}
				s.blocks[i][in.Name] = append(s.blocks[i][in.Name],
					storeRec{device: p.Device, pos: p.Pos(k), name: in.Name, full: in.Full, off: in.Offsets, block: blk})
			}
		}
	}
	return s, nil
}

func typeOf(x *kernels.Tensor) string {
	if x == nil {
		return "missing"
	}
	return x.Type.String()
}

// covered reports whether every micro-batch's block of load in lies inside one of blocks
// (offsets and extent). Loads of persistent tensors carry no stride, so micro-batch 0's
// offsets stand for all.
func covered(blocks [][2][]int, in *program.Instr, ext ir.Shape) bool {
	if len(in.Stride) > 0 {
		return false
	}
	for _, b := range blocks {
		if inside(in.Offsets, ext, b[0], ir.Shape(b[1])) {
			return true
		}
	}
	return false
}

// SetTrace sets whether the following steps record a trace (Options.Trace).
func (s *Session) SetTrace(on bool) { s.opts.Trace = on }

// Hosted returns the names kept on the host rather than on the devices, sorted.
func (s *Session) Hosted() []string { return slices.Sorted(maps.Keys(s.host)) }

// Lead reports whether this process writes what the group shares: always without a group.
func (s *Session) Lead() bool { return s.group == nil || s.group.Lead() }

// Step runs the programs once on data (the inputs that are not resident) and returns the
// stores of the other names, assembled, with the counters of every device (of the whole
// group); given outputs, only the stores of those names are assembled (the rest,
// gradients kept for checks, are dropped where they were made). The resident blocks are
// replaced by the ones the step stored; after an error they are unchanged.
func (s *Session) Step(ctx context.Context, data Data, outputs ...string) (*Result, error) {
	for name := range data {
		if s.names[name] {
			return nil, fmt.Errorf("runtime: session: feed %s is resident on the devices, expected only data inputs", name)
		}
	}
	feeds := Data{}
	maps.Copy(feeds, data)
	maps.Copy(feeds, s.host)
	var (
		opts   Options
		inproc *InProc
	)
	if s.group == nil {
		opts, inproc = prepare(s.progs, s.opts)
	} else {
		opts = s.opts
		if opts.Timeout <= 0 {
			opts.Timeout = DefaultTimeout
		}
		t, err := s.group.Begin(ctx, feeds)
		if err != nil {
			return nil, err
		}
		opts.Transport = t
	}
	devs := make([]*device, len(s.local))
	start := time.Now()
	for j, i := range s.local {
		devs[j] = newDevice(s.progs[i], feeds, &opts, start)
		devs[j].resident = s.blocks[i]
	}
	if err := runDevices(ctx, devs, inproc, opts); err != nil {
		return nil, err
	}
	// What crosses to the host: the stores of the names that are not resident, of the
	// outputs asked for.
	var want map[string]bool
	if len(outputs) > 0 {
		want = map[string]bool{}
		for _, o := range outputs {
			want[o] = true
		}
	}
	resident := func(name string) bool { return s.names[name] && s.host[name] == nil }
	mine := make([]*DeviceResult, len(devs))
	for j, d := range devs {
		r := &DeviceResult{Stats: d.stats, Trace: d.trace}
		for _, st := range d.stores {
			if resident(st.name) || (want != nil && !want[st.name] && !s.names[st.name]) {
				continue
			}
			r.Stats.StoreBytes += tensorBytes(st.block)
			r.Stores = append(r.Stores, st.export())
		}
		mine[j] = r
	}
	res, err := s.assemble(ctx, mine)
	if err != nil {
		return nil, err
	}
	for name := range s.host {
		x, ok := res.Stores[name]
		if !ok {
			return nil, fmt.Errorf("runtime: session: the step did not store %s", name)
		}
		s.host[name] = x
		delete(res.Stores, name)
	}
	for j, i := range s.local {
		next := map[string][]storeRec{}
		for _, st := range devs[j].stores {
			if resident(st.name) {
				next[st.name] = append(next[st.name], st)
			}
		}
		s.blocks[i] = next
	}
	return res, nil
}

// Gather assembles the resident and hosted tensors whole, checking that replicas agree.
// In a group every process must call it: the blocks of every process are exchanged.
func (s *Session) Gather(ctx context.Context) (Data, error) {
	mine := make([]*DeviceResult, len(s.local))
	for j, i := range s.local {
		r := &DeviceResult{Stats: DeviceStats{Device: s.progs[i].Device}}
		for _, name := range slices.Sorted(maps.Keys(s.blocks[i])) {
			for _, b := range s.blocks[i][name] {
				r.Stores = append(r.Stores, b.export())
			}
		}
		mine[j] = r
	}
	res, err := s.assemble(ctx, mine)
	if err != nil {
		return nil, err
	}
	out := res.Stores
	for name, x := range s.host {
		out[name] = x.Clone()
	}
	for _, n := range slices.Sorted(maps.Keys(s.names)) {
		if out[n] == nil {
			return nil, fmt.Errorf("runtime: session: no device holds %s", n)
		}
	}
	return out, nil
}

// ResidentBytes returns, per device of this process in program order, the bytes of the
// blocks it holds.
func (s *Session) ResidentBytes() []int64 {
	out := make([]int64, len(s.local))
	for j, i := range s.local {
		for _, bs := range s.blocks[i] {
			for _, b := range bs {
				out[j] += tensorBytes(b.block)
			}
		}
	}
	return out
}

// assemble puts together this process's device results and, in a group, every other
// process's: every process must call it at the same point.
func (s *Session) assemble(ctx context.Context, mine []*DeviceResult) (*Result, error) {
	parts := mine
	if s.group != nil {
		var err error
		if parts, err = s.group.Exchange(ctx, mine); err != nil {
			return nil, err
		}
	}
	return Assemble(parts)
}
