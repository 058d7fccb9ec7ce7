package program

import (
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// DeviceID numbers a device of the cluster. It is mesh's type, so that the device groups of
// a plan's logical meshes go into instructions unchanged.
type DeviceID = mesh.DeviceID

// BufferID indexes Program.Buffers. Buffers are SSA-like: each is defined by exactly one
// instruction, then read, possibly updated in place (all_reduce, accumulate), and freed.
type BufferID int32

// NoBuffer is the BufferID of nothing: the Out of an instruction that defines no buffer.
const NoBuffer BufferID = -1

// BufferDecl declares one buffer of a program: the type of the local shard it holds and the
// name it is printed with (the ir value it holds a shard of, plus a suffix of its own).
//
// A buffer is either of the step (defined and freed once) or, PerMicrobatch, of one
// micro-batch: it is defined, used and freed only by micro-batch blocks, and the runtime
// keeps one copy per micro-batch in flight, selected by the micro-batch the block runs for.
type BufferDecl struct {
	Name          string
	Type          ir.Type
	PerMicrobatch bool
}

// Program is the instruction list of one device, in blocks run by a schedule.
//
// Instrs holds every block's instructions, block after block; Blocks cut it into
// contiguous stretches and Schedule says in which order, and for which micro-batch, each
// runs. A program without Blocks is one block of the step run once: Instrs in list order.
//
// The only synchronization between devices is the collectives and send/recv, which every
// member must issue in the same relative order (as in MPI).
type Program struct {
	Device  DeviceID
	Instrs  []Instr
	Buffers []BufferDecl
	// Microbatches is the number of micro-batches of the step (the loops' range: 0 …
	// Microbatches−1); 0 in a program without micro-batch blocks.
	Microbatches int
	Blocks       []Block
	Schedule     []Loop
}

// Block is a stretch Instrs[Start:End] of a program, run as a unit.
type Block struct {
	// Name says what the block does: codegen writes "prologue", "forward", "backward" and
	// "update".
	Name       string
	Start, End int
	// PerMicrobatch blocks run once per micro-batch (their buffers and transfers are those
	// of that micro-batch); the others run once per step.
	PerMicrobatch bool
}

// Loop runs its Body for every index i in [From, To), in order: each call runs its block
// for micro-batch i + Shift. A loop over a block of the step has From = 0, To = 1 and one
// call, with Shift 0.
type Loop struct {
	From, To int
	Body     []Call
}

// Call is one block run inside a loop.
type Call struct {
	Block int
	Shift int
}

// MaxMicrobatches bounds Program.Microbatches, so that a program's schedule, expanded,
// stays countable in an int and its runtime state small.
const MaxMicrobatches = 1 << 20

// BlockSchedule returns the program's blocks and schedule, a program without Blocks being one
// block of the step run once.
func (p *Program) BlockSchedule() ([]Block, []Loop) {
	if len(p.Blocks) == 0 {
		return []Block{{Name: "step", Start: 0, End: len(p.Instrs)}}, []Loop{{From: 0, To: 1, Body: []Call{{Block: 0}}}}
	}
	return p.Blocks, p.Schedule
}

// BlockOf returns the index of the block that holds instruction i (0 in a program without
// Blocks), or −1 if i is out of range.
func (p *Program) BlockOf(i int) int {
	if i < 0 || i >= len(p.Instrs) {
		return -1
	}
	if len(p.Blocks) == 0 {
		return 0
	}
	lo, hi := 0, len(p.Blocks)
	for lo < hi { // the first block that ends after i
		m := (lo + hi) / 2
		if p.Blocks[m].End <= i {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(p.Blocks) || p.Blocks[lo].Start > i {
		return -1
	}
	return lo
}

// Execution yields the instructions of p in run order, each with the micro-batch it runs
// for (−1 in a block of the step): for pc, mb := range p.Execution { … }. It expands the
// schedule lazily, holding nothing per micro-batch. p must be valid.
func (p *Program) Execution(yield func(pc, mb int) bool) {
	blocks, sched := p.BlockSchedule()
	for _, l := range sched {
		for i := l.From; i < l.To; i++ {
			for _, c := range l.Body {
				b := blocks[c.Block]
				mb := -1
				if b.PerMicrobatch {
					mb = i + c.Shift
				}
				for pc := b.Start; pc < b.End; pc++ {
					if !yield(pc, mb) {
						return
					}
				}
			}
		}
	}
}

// Calls yields the blocks of p in run order with the micro-batch each runs for (−1 for a
// block of the step). p must be valid.
func (p *Program) Calls(yield func(block, mb int) bool) {
	blocks, sched := p.BlockSchedule()
	for _, l := range sched {
		for i := l.From; i < l.To; i++ {
			for _, c := range l.Body {
				mb := -1
				if blocks[c.Block].PerMicrobatch {
					mb = i + c.Shift
				}
				if !yield(c.Block, mb) {
					return
				}
			}
		}
	}
}

// Kind is the kind of an instruction.
type Kind uint8

// The instruction kinds. The order is not part of any format: text and JSON use names.
const (
	KindInvalid Kind = iota
	// Compute applies one ir op to local shards: Out = Op(Args...; Attrs).
	Compute
	// Constant defines Out filled with Value; a zero-initialized gradient accumulator is a
	// Constant with Value 0.
	Constant
	// Load defines Out as the block of the feed Name (a param, input or state, given to the
	// runtime whole) that starts at Offsets and has Out's shape. A micro-batch slice of an
	// input is a load with an offset on the batch dim.
	Load
	// Store writes Args[0] into the result Name, a tensor of type Full, at Offsets: an
	// updated param or state shard, or an output.
	Store
	// Accumulate adds Args[1] into Args[0] in place (a gradient accumulator).
	Accumulate
	// AllReduce sums Args[0] over Group in place.
	AllReduce
	// AllGather defines Out as the blocks of Args[0] of every member of Group concatenated
	// along Axis in group order.
	AllGather
	// ReduceScatter defines Out as block r (r = this device's rank in Group) along Axis of
	// the sum over Group of Args[0].
	ReduceScatter
	// AllToAll splits Args[0] along Axis into len(Group) blocks, sends block j to rank j,
	// and defines Out as the blocks received concatenated along ConcatAxis in group order.
	AllToAll
	// Send sends Args[0] to Peer under Tag.
	Send
	// Recv defines Out as what Peer sent under Tag.
	Recv
	// Free releases Args: they are not read again.
	Free
	numKinds
)

// NumKinds is the number of instruction kinds, for slices indexed by Kind (KindInvalid
// included, at 0).
const NumKinds = int(numKinds)

var kindNames = [...]string{
	KindInvalid:   "invalid",
	Compute:       "compute",
	Constant:      "constant",
	Load:          "load",
	Store:         "store",
	Accumulate:    "accumulate",
	AllReduce:     "all_reduce",
	AllGather:     "all_gather",
	ReduceScatter: "reduce_scatter",
	AllToAll:      "all_to_all",
	Send:          "send",
	Recv:          "recv",
	Free:          "free",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// ParseKind returns the kind named s ("all_reduce", ...).
func ParseKind(s string) (Kind, bool) {
	for k := Compute; k < numKinds; k++ {
		if kindNames[k] == s {
			return k, true
		}
	}
	return KindInvalid, false
}

// IsCollective reports whether k is one of the four group collectives.
func (k Kind) IsCollective() bool {
	return k == AllReduce || k == AllGather || k == ReduceScatter || k == AllToAll
}

// Tag names one point-to-point transfer: the value it carries and the micro-batch, so that
// the transfers of one value for different micro-batches never match each other. In a
// micro-batch block an instruction's tag has MicroBatch 0 and the transfer is tagged with
// the micro-batch the block runs for.
type Tag struct {
	Value      string
	MicroBatch int
}

// Instr is one instruction. Which fields a kind reads is listed on the Kind constants; the
// others stay at their zero value (Out at NoBuffer), which Validate checks.
type Instr struct {
	Kind Kind
	// Out is the buffer the instruction defines, or NoBuffer.
	Out BufferID
	// Args are the buffers it reads (and, for all_reduce and accumulate, updates).
	Args []BufferID

	Op    ir.Op    // compute
	Attrs ir.Attrs // compute

	Group      []DeviceID // collectives: the members in rank order, which orders the blocks
	Axis       int        // all_gather: concat axis; reduce_scatter and all_to_all: split axis
	ConcatAxis int        // all_to_all

	Peer DeviceID // send, recv
	Tag  Tag      // send, recv

	Name    string // load: the feed; store: the result
	Offsets []int  // load, store: where the block starts in the whole tensor
	// Stride (load in a micro-batch block) is how far the offsets move per micro-batch:
	// micro-batch mb loads at Offsets + mb·Stride (an input's slice along its batch dim).
	Stride []int
	Full   ir.Type // store: the type of the whole result tensor
	Value  float64 // constant

	// Note is a free comment printed after "; " (what a collective is for, say).
	Note string
}

// Defines reports the buffer in defines, if any.
func (in *Instr) Defines() (BufferID, bool) { return in.Out, in.Out != NoBuffer }

// Rank returns the position of d in group, or -1.
func Rank(group []DeviceID, d DeviceID) int {
	for i, g := range group {
		if g == d {
			return i
		}
	}
	return -1
}

// CollectiveOut returns the type a collective of kind k over n devices gives for an input
// of type in (all_reduce: in; all_gather: dim axis times n; reduce_scatter: dim axis over n;
// all_to_all: dim axis over n and dim concat times n), or ok = false when the axes are out
// of range or n does not divide the split dim.
func CollectiveOut(k Kind, in ir.Type, n, axis, concat int) (ir.Type, bool) {
	out := ir.Type{DType: in.DType, Shape: in.Shape.Clone()}
	inRange := func(a int) bool { return a >= 0 && a < in.Shape.Rank() }
	switch k {
	case AllReduce:
		return out, true
	case AllGather:
		if !inRange(axis) {
			return out, false
		}
		out.Shape[axis] *= n
	case ReduceScatter, AllToAll:
		if !inRange(axis) || in.Shape[axis]%n != 0 || (k == AllToAll && !inRange(concat)) {
			return out, false
		}
		out.Shape[axis] /= n
		if k == AllToAll {
			out.Shape[concat] *= n
		}
	default:
		return out, false
	}
	return out, true
}

// AddBuffer declares a buffer of the step and returns its ID.
func (p *Program) AddBuffer(name string, t ir.Type) BufferID {
	p.Buffers = append(p.Buffers, BufferDecl{Name: name, Type: t})
	return BufferID(len(p.Buffers) - 1)
}

// LoadOffsets returns where load instruction in reads its block for micro-batch mb.
func LoadOffsets(in *Instr, mb int) []int {
	if len(in.Stride) == 0 || mb <= 0 {
		return in.Offsets
	}
	off := make([]int, len(in.Offsets))
	for d, o := range in.Offsets {
		off[d] = o
		if d < len(in.Stride) {
			off[d] += mb * in.Stride[d]
		}
	}
	return off
}

// TransferTag returns the tag a send or recv instruction carries when it runs for
// micro-batch mb (−1: in a block of the step, where the instruction's tag is used as is).
func TransferTag(in *Instr, mb int) Tag {
	if mb < 0 {
		return in.Tag
	}
	return Tag{Value: in.Tag.Value, MicroBatch: in.Tag.MicroBatch + mb}
}
