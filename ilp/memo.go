package ilp

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"
	"sync"
)

// The solve memo. The sharding search solves some ILPs more than once, word for word (the
// same layer on the same logical mesh reached from two stage ranges or micro-batch counts:
// 20 of the 62 solves of gpt-1.3b on 4 GPUs repeated an earlier one). lp_solve is
// deterministic, so an answer that does not depend on the clock — an optimum, an
// infeasibility, a stop at an iteration limit — is a function of the problem, and Solve
// keeps the recent ones under a hash of everything that determines them. Concurrent
// solves of one problem wait for the first instead of solving it again.

// memoValues bounds the memo's size: the values of the solutions kept, in float64s.
const memoValues = 4 << 20

type memoKey [sha256.Size]byte

type memoEntry struct {
	done chan struct{} // closed when sol and err are set
	sol  *Solution
	err  error
	ok   bool // the answer may be reused (see cacheable)
}

type solveMemo struct {
	mu      sync.Mutex
	entries map[memoKey]*memoEntry
	order   []memoKey // insertion order, for eviction
	values  int
}

var memo = solveMemo{entries: map[memoKey]*memoEntry{}}

// keyOf hashes the problem, the iteration limit, the start, the incumbent and the solver settings: all that decides
// an answer that no clock or context cut short.
func keyOf(p *Problem, opts Options, t tuning) memoKey {
	h := sha256.New()
	var buf [8]byte
	u := func(x uint64) {
		binary.LittleEndian.PutUint64(buf[:], x)
		h.Write(buf[:])
	}
	f := func(x float64) { u(math.Float64bits(x)) }
	terms := func(ts []Term) {
		u(uint64(len(ts)))
		for _, t := range ts {
			u(uint64(t.Var))
			f(t.Coef)
		}
	}
	u(uint64(len(p.Vars)))
	for _, v := range p.Vars {
		u(uint64(v.Kind))
		f(v.Lo)
		f(v.Hi)
	}
	terms(p.Objective)
	f(p.ObjConstant)
	u(uint64(len(p.Rows)))
	for i := range p.Rows {
		terms(p.Rows[i].Terms)
		u(uint64(p.Rows[i].Sense))
		f(p.Rows[i].RHS)
	}
	u(uint64(max(0, opts.Iterations)))
	if x := opts.Incumbent; x != nil { // the incumbent may be the answer
		u(math.MaxUint64 - 1)
		u(uint64(len(x)))
		for _, v := range x {
			f(v)
		}
	}
	if b := opts.Start; b != nil { // the start decides which optimum is found
		u(math.MaxUint64)
		u(uint64(len(b.Vars)))
		u(uint64(len(b.Rows)))
		h.Write(statusBytes(b.Vars))
		h.Write(statusBytes(b.Rows))
	}
	for _, x := range []int{t.presolve, t.scaling, t.bbRule, t.floor, t.improve, t.depth, t.simplex, t.pivoting, t.crash, t.firstRule} {
		u(uint64(int64(x)))
	}
	for _, x := range []float64{t.epsPivot, t.epsEl, t.gapAbs, t.gapRel} {
		f(x)
	}
	if t.scaleRows {
		u(1)
	}
	var k memoKey
	h.Sum(k[:0])
	return k
}

func statusBytes(ss []BasisStatus) []byte {
	out := make([]byte, len(ss))
	for i, s := range ss {
		out[i] = byte(s)
	}
	return out
}

// cacheable says whether an answer is a function of the problem alone: not a stop by the
// clock or the context, nor a failure of the solver's plumbing.
func cacheable(sol *Solution, err error, m *lpModel) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, ErrInfeasible), errors.Is(err, ErrUnbounded):
		return true
	case errors.Is(err, ErrTimeout):
		return m != nil && m.exhausted() && !m.timedOut()
	}
	return false
}

// lookup returns the entry for k and whether the caller must solve it (it is the first to
// ask, or the answer it waited for could not be reused); it waits while another goroutine
// solves k, and returns ctx's error if ctx ends first.
func (c *solveMemo) lookup(ctx context.Context, k memoKey) (*memoEntry, bool, error) {
	for {
		c.mu.Lock()
		e, found := c.entries[k]
		if !found {
			e = &memoEntry{done: make(chan struct{})}
			c.entries[k] = e
			c.mu.Unlock()
			return e, true, nil
		}
		c.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		if e.ok {
			return e, false, nil
		}
		// The first solve was cut short; it removed its entry: try again.
	}
}

// finish records the answer of the entry the caller solved and wakes the waiters. An
// answer that cannot be reused is dropped from the memo.
func (c *solveMemo) finish(k memoKey, e *memoEntry, sol *Solution, err error, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.err, e.ok = err, ok
	if sol != nil {
		e.sol = &Solution{Values: append([]float64(nil), sol.Values...), Objective: sol.Objective, Status: sol.Status, Basis: sol.Basis}
	}
	close(e.done)
	if !ok {
		delete(c.entries, k)
		return
	}
	c.order = append(c.order, k)
	if sol != nil {
		c.values += len(sol.Values)
	}
	for c.values > memoValues && len(c.order) > 1 {
		old := c.order[0]
		c.order = c.order[1:]
		if o := c.entries[old]; o != nil && o.sol != nil {
			c.values -= len(o.sol.Values)
		}
		delete(c.entries, old)
	}
}

// answer returns a copy of the entry's answer, so that callers may change their Solution.
func (e *memoEntry) answer() (*Solution, error) {
	if e.sol == nil {
		return nil, e.err
	}
	s := *e.sol
	s.Values = append([]float64(nil), e.sol.Values...)
	return &s, e.err
}
