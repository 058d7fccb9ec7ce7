package runtime

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// Session runs the same programs step after step, keeping the tensors that persist between
// steps (a training step's params and optimizer state) on the devices: each device holds
// the blocks its programs store of them, and its loads of them in the next step slice those
// blocks instead of a feed. A step then takes only the data inputs from the host and hands
// back only the other stores (the loss); Gather assembles the resident tensors on demand.
//
// codegen stores a replicated result from one replica only, so a device whose load is not
// inside a block it stored itself takes it from a replica's block (DeviceStats.PeerBytes:
// in process, a copy). A name some load of which lies inside no stored block (a plan that
// reads a param replicated but updates it sharded, as gpt-tiny's embedding under tensor
// parallelism) is kept on the host instead: assembled from the stores after each step and
// fed to the next, as Run does. Hosted returns those names; their bytes show in
// DeviceStats.FeedBytes and StoreBytes.
//
// A Session is not safe for concurrent use.
type Session struct {
	progs []*program.Program
	opts  Options
	names map[string]bool // every resident or hosted name
	// blocks[i] holds device i's resident blocks by name.
	blocks []map[string][]storeRec
	host   Data // the hosted names' full tensors
}

// NewSession validates the programs and places the initial tensors: every name in init is
// one the programs load and store (a persistent tensor), whole; each device takes the
// blocks it stores of it. The names of init must be exactly the names both loaded and
// stored by the programs; another name, a missing one or a wrong type is an error naming
// it. The tensors are copied.
func NewSession(programs []*program.Program, init Data, opts Options) (*Session, error) {
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
	s := &Session{progs: programs, opts: opts, names: map[string]bool{}, host: Data{}}
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
	s.blocks = make([]map[string][]storeRec, len(programs))
	hosted := map[string]bool{}
	for i, p := range programs {
		s.blocks[i] = map[string][]storeRec{}
		for k := range p.Instrs {
			in := &p.Instrs[k]
			if in.Kind == program.Store && s.names[in.Name] {
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
	for i, p := range programs {
		view := s.view(i)
		for k := range p.Instrs {
			in := &p.Instrs[k]
			if in.Kind == program.Load && s.names[in.Name] && !covered(view[in.Name], in, p.Buffers[in.Out].Type.Shape) {
				hosted[in.Name] = true
			}
		}
	}
	for name := range hosted {
		s.host[name] = init[name].Clone()
		for i := range s.blocks {
			delete(s.blocks[i], name)
		}
	}
	return s, nil
}

// view returns the resident blocks device i's loads may take: its own first, then its
// replicas'.
func (s *Session) view(i int) map[string][]storeRec {
	out := map[string][]storeRec{}
	for name, bs := range s.blocks[i] {
		out[name] = append(out[name], bs...)
	}
	for j, m := range s.blocks {
		if j == i {
			continue
		}
		for name, bs := range m {
			out[name] = append(out[name], bs...)
		}
	}
	return out
}

func typeOf(x *kernels.Tensor) string {
	if x == nil {
		return "missing"
	}
	return x.Type.String()
}

// covered reports whether every micro-batch's block of load in lies inside one of blocks.
// Loads of persistent tensors carry no stride, so micro-batch 0's offsets stand for all.
func covered(blocks []storeRec, in *program.Instr, ext ir.Shape) bool {
	if len(in.Stride) > 0 {
		return false
	}
	for _, b := range blocks {
		if inside(in.Offsets, ext, b.off, b.block.Type.Shape) {
			return true
		}
	}
	return false
}

// SetTrace sets whether the following steps record a trace (Options.Trace).
func (s *Session) SetTrace(on bool) { s.opts.Trace = on }

// Hosted returns the names kept on the host rather than on the devices, sorted.
func (s *Session) Hosted() []string { return slices.Sorted(maps.Keys(s.host)) }

// Step runs the programs once on data (the inputs that are not resident) and returns the
// stores of the other names, assembled, with the counters; given outputs, only the stores
// of those names are assembled (the rest, gradients kept for checks, are dropped where they
// were made). The resident blocks are replaced by the ones the step stored; after an error
// they are unchanged.
func (s *Session) Step(ctx context.Context, data Data, outputs ...string) (*Result, error) {
	for name := range data {
		if s.names[name] {
			return nil, fmt.Errorf("runtime: session: feed %s is resident on the devices, expected only data inputs", name)
		}
	}
	feeds := Data{}
	maps.Copy(feeds, data)
	maps.Copy(feeds, s.host)
	opts, inproc := prepare(s.progs, s.opts)
	devs := make([]*device, len(s.progs))
	start := time.Now()
	for i, p := range s.progs {
		devs[i] = newDevice(p, feeds, &opts, start)
		devs[i].resident = s.view(i)
	}
	if err := runDevices(ctx, devs, inproc, opts); err != nil {
		return nil, err
	}
	keep := map[string]bool{} // the names not assembled
	for name := range s.names {
		keep[name] = s.host[name] == nil
	}
	skip := maps.Clone(keep)
	if len(outputs) > 0 {
		want := map[string]bool{}
		for _, o := range outputs {
			want[o] = true
		}
		for _, d := range devs {
			for _, st := range d.stores {
				if !want[st.name] && !s.names[st.name] {
					skip[st.name] = true
				}
			}
		}
	}
	res, err := collect(devs, skip)
	if err != nil {
		return nil, err
	}
	next := make([]map[string][]storeRec, len(devs))
	for i, d := range devs {
		next[i] = map[string][]storeRec{}
		for _, st := range d.stores {
			if keep[st.name] {
				next[i][st.name] = append(next[i][st.name], st)
			}
		}
	}
	for name := range s.host {
		x, ok := res.Stores[name]
		if !ok {
			return nil, fmt.Errorf("runtime: session: the step did not store %s", name)
		}
		s.host[name] = x
		delete(res.Stores, name)
	}
	s.blocks = next
	return res, nil
}

// Gather assembles the resident and hosted tensors whole, checking that replicas agree.
func (s *Session) Gather() (Data, error) {
	var asm assembler
	for _, m := range s.blocks {
		for _, name := range slices.Sorted(maps.Keys(m)) {
			for _, b := range m[name] {
				if err := asm.add(b); err != nil {
					return nil, err
				}
			}
		}
	}
	out := Data{}
	if err := asm.finish(out); err != nil {
		return nil, err
	}
	for name, x := range s.host {
		out[name] = x.Clone()
	}
	names := make([]string, 0, len(s.names))
	for n := range s.names {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if out[n] == nil {
			return nil, fmt.Errorf("runtime: session: no device holds %s", n)
		}
	}
	return out, nil
}

// ResidentBytes returns, per device in program order, the bytes of the blocks it holds.
func (s *Session) ResidentBytes() []int64 {
	out := make([]int64, len(s.blocks))
	for i, m := range s.blocks {
		for _, bs := range m {
			for _, b := range bs {
				out[i] += tensorBytes(b.block)
			}
		}
	}
	return out
}
