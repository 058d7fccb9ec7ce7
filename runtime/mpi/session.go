package mpi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
)

// rankTransport is what a Session needs of this rank's transport.
type rankTransport interface {
	runtime.Transport
	Flush(ctx context.Context) error
	Unreceived() ([]string, error)
}

// Session runs one set of programs, step after step, with this rank as device Rank: the
// multi-process counterpart of runtime.Run (Run), and the runtime.Group under a
// runtime.Session that keeps params and state on the ranks (an autopar.Trainer with
// TrainerOptions.Group).
type Session struct {
	w        *World
	programs []*program.Program
	t        rankTransport
	timeout  time.Duration
	fed      bool // the first step checked that every rank has the same feeds
	// Wrap, when set, wraps this rank's transport for the runs that follow: a seam for
	// counting, tracing or injecting faults (the tests stall a rank mid-step with it).
	Wrap func(runtime.Transport) runtime.Transport
}

// NewSession prepares this rank to run its device's program of programs. Every rank calls
// it with what it believes are the same programs: it checks that the job has one rank per
// device (devices 0 to Size-1) and that every rank's programs hash the same as rank 0's
// (a rank started from another plan is refused before anything runs), then makes the
// transport's communicators. timeout bounds each of its waits for the other ranks.
func (w *World) NewSession(ctx context.Context, programs []*program.Program, timeout time.Duration) (*Session, error) {
	if len(programs) != w.Size() {
		return nil, fmt.Errorf("mpi: the programs are for %d devices, but mpirun started %d ranks: run mpirun -np %d", len(programs), w.Size(), len(programs))
	}
	have := make([]bool, len(programs))
	for _, p := range programs {
		if p == nil || int(p.Device) < 0 || int(p.Device) >= len(programs) || have[p.Device] {
			return nil, fmt.Errorf("mpi: the programs must be for devices 0 to %d, one each, to run device r on rank r", len(programs)-1)
		}
		have[p.Device] = true
	}
	h := sha256.New()
	for _, p := range programs {
		data, err := p.MarshalJSON()
		if err != nil {
			return nil, err
		}
		h.Write(data)
	}
	if err := w.Agree(ctx, timeout, "programs", h.Sum(nil)); err != nil {
		return nil, err
	}
	t, err := w.newTransport(programs)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = runtime.DefaultTimeout
	}
	return &Session{w: w, programs: programs, t: t, timeout: timeout}, nil
}

// Agree checks that every rank passed the same fingerprint (a hash of what it was started
// with) as rank 0, by gathering them all; the error names the ranks that differ.
func (w *World) Agree(ctx context.Context, timeout time.Duration, what string, fingerprint []byte) error {
	ctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	all, err := w.Allgather(ctx, fingerprint)
	if err != nil {
		return fmt.Errorf("mpi: comparing the %s of the ranks: %w", what, err)
	}
	var bad []int
	for r, fp := range all {
		if !bytes.Equal(fp, all[0]) {
			bad = append(bad, r)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("mpi: %s started with %s (hash %.12x) that differ from rank 0's (hash %.12x): every rank must run the same; refusing to start",
			ranksString(bad), what, all[bad[0]], all[0])
	}
	return nil
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		d = runtime.DefaultTimeout
	}
	return context.WithTimeout(ctx, d)
}

// Run executes one step: this rank runs its device's program with runtime.RunDevice over
// the MPI transport, then the ranks exchange their results (MPI_Allgatherv), so that every
// rank returns the same *runtime.Result that runtime.Run returns in-process: stores
// assembled whole, counters and trace of every device in program order. Trace times count
// from a barrier all ranks passed together.
//
// An error leaves the other ranks waiting; the caller should print it and Abort.
func (s *Session) Run(ctx context.Context, data runtime.Data, opts runtime.Options) (*runtime.Result, error) {
	if opts.Timeout > 0 {
		s.timeout = opts.Timeout
	}
	opts.Timeout = s.timeout
	t, err := s.Begin(ctx, data)
	if err != nil {
		return nil, err
	}
	opts.Transport = t
	mine, err := runtime.RunDevice(ctx, s.programs, runtime.DeviceID(s.w.Rank()), data, opts, time.Now())
	if err != nil {
		return nil, err
	}
	parts, err := s.Exchange(ctx, []*runtime.DeviceResult{mine})
	if err != nil {
		return nil, err
	}
	return runtime.Assemble(parts)
}

// Local implements runtime.Group: this rank runs device Rank.
func (s *Session) Local(d runtime.DeviceID) bool { return int(d) == s.w.Rank() }

// Lead implements runtime.Group: rank 0 writes what the ranks share.
func (s *Session) Lead() bool { return s.w.Rank() == 0 }

// Begin implements runtime.Group: the first step checks that every rank has the same
// feeds; every step waits at a barrier for every rank and returns this rank's transport.
func (s *Session) Begin(ctx context.Context, data runtime.Data) (runtime.Transport, error) {
	if !s.fed {
		if err := s.w.Agree(ctx, s.timeout, "feeds", feedsHash(data)); err != nil {
			return nil, err
		}
		s.fed = true
	}
	bctx, cancel := withTimeout(ctx, s.timeout)
	err := s.w.Barrier(bctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("mpi: rank %d: waiting for every rank before the step (MPI_Ibarrier; it cannot say which rank is missing): %w", s.w.Rank(), err)
	}
	if s.Wrap != nil {
		return s.Wrap(s.t), nil
	}
	return s.t, nil
}

// Exchange implements runtime.Group: it waits for this rank's sends to complete, gathers
// every rank's results (MPI_Allgatherv) and checks that no message was left unreceived;
// the results come back in the order of the programs.
func (s *Session) Exchange(ctx context.Context, mine []*runtime.DeviceResult) ([]*runtime.DeviceResult, error) {
	fctx, cancel := withTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.t.Flush(fctx); err != nil {
		return nil, err
	}
	wire := make([]*wireResult, len(mine))
	for i, r := range mine {
		wire[i] = toWire(r)
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(wire); err != nil {
		return nil, fmt.Errorf("mpi: encoding the results of rank %d: %w", s.w.Rank(), err)
	}
	all, err := s.w.Allgather(fctx, buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("mpi: rank %d: gathering the results of every rank: %w", s.w.Rank(), err)
	}
	if left, err := s.t.Unreceived(); err != nil || len(left) > 0 {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("runtime: %s", left[0])
	}
	byDevice := map[runtime.DeviceID]*runtime.DeviceResult{}
	for r, b := range all {
		var ws []*wireResult
		if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&ws); err != nil {
			return nil, fmt.Errorf("mpi: decoding the results of rank %d: %w", r, err)
		}
		for _, w := range ws {
			x, err := w.result()
			if err != nil {
				return nil, fmt.Errorf("mpi: decoding the results of rank %d: %w", r, err)
			}
			byDevice[x.Stats.Device] = x
		}
	}
	// Put them in the order of the programs, as runtime.Run does.
	ordered := make([]*runtime.DeviceResult, len(s.programs))
	for i, p := range s.programs {
		if ordered[i] = byDevice[p.Device]; ordered[i] == nil {
			return nil, fmt.Errorf("mpi: no rank sent the results of device %d", p.Device)
		}
	}
	return ordered, nil
}

// feedsHash fingerprints the feeds: names in order, types and element bits.
func feedsHash(data runtime.Data) []byte {
	names := make([]string, 0, len(data))
	for k := range data {
		names = append(names, k)
	}
	slices.Sort(names)
	h := sha256.New()
	var b [8]byte
	for _, k := range names {
		x := data[k]
		fmt.Fprintf(h, "%s %s\n", k, x.Type)
		for i := range x.Len() {
			switch {
			case x.F32 != nil:
				binary.LittleEndian.PutUint32(b[:4], math.Float32bits(x.F32[i]))
				h.Write(b[:4])
			case x.F64 != nil:
				binary.LittleEndian.PutUint64(b[:], math.Float64bits(x.F64[i]))
				h.Write(b[:])
			default:
				binary.LittleEndian.PutUint64(b[:], uint64(x.Int[i]))
				h.Write(b[:])
			}
		}
	}
	return h.Sum(nil)
}

// ranksString names ranks for a message: "rank 3", "ranks 1, 2".
func ranksString(rs []int) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.Itoa(r)
	}
	if len(rs) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ", ")
}

// wireResult is a runtime.DeviceResult as the ranks exchange it: gob for the structure, and
// each stored block in this package's message encoding (one copy of its storage; gob would
// encode every element on its own).
type wireResult struct {
	Stats  runtime.DeviceStats
	Trace  []runtime.TraceEvent
	Stores []wireStore
}

type wireStore struct {
	Device  runtime.DeviceID
	Pos     ir.Pos
	Name    string
	Full    ir.Type
	Offsets []int
	Block   []byte
}

func toWire(r *runtime.DeviceResult) *wireResult {
	w := &wireResult{Stats: r.Stats, Trace: r.Trace}
	for _, s := range r.Stores {
		b := make([]byte, encodedSize(s.Block, program.Tag{}))
		encode(b, s.Block, program.Tag{})
		w.Stores = append(w.Stores, wireStore{s.Device, s.Pos, s.Name, s.Full, s.Offsets, b})
	}
	return w
}

func (w *wireResult) result() (*runtime.DeviceResult, error) {
	r := &runtime.DeviceResult{Stats: w.Stats, Trace: w.Trace}
	for _, s := range w.Stores {
		x, _, err := decode(s.Block)
		if err != nil {
			return nil, fmt.Errorf("store to %s: %w", s.Name, err)
		}
		r.Stores = append(r.Stores, runtime.StoreBlock{Device: s.Device, Pos: s.Pos, Name: s.Name, Full: s.Full, Offsets: s.Offsets, Block: x})
	}
	return r, nil
}

var _ runtime.Group = (*Session)(nil)
