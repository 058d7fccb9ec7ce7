package ilp

// This file is the whole cgo binding to lp_solve 5.5 (Debian's
// liblpsolve55-dev, linked statically from /usr/lib). It knows lp_solve's
// calling conventions and return codes and nothing of Solve's policy.
//
// Memory: lp_solve copies every array it is given, and the arrays passed are
// Go slices of C.int and C.double, which hold no Go pointers, so cgo's pointer
// rules allow passing them directly. The one object lp_solve keeps a pointer
// to across calls (the abort control read by the abort callback) lives in
// C.malloc'd memory.
//
// Cancellation: lp_solve polls an abort callback during its search. The
// callback is written in C (no Go callback, so nothing re-enters the Go
// runtime from lp_solve's stack); it reads an iteration limit, a deadline on the
// solving thread's CPU time, and a cancel flag that Go sets atomically when the
// context ends.

/*
#cgo CFLAGS: -I/usr/include/lpsolve
#cgo LDFLAGS: -L/usr/lib -llpsolve55 -lcolamd -ldl -lm
#include <stdlib.h>
#include <time.h>
#include <lp_lib.h>

typedef struct {
	int cancel;         // set atomically by Go when the context ends
	int timedout;       // set by ap_abort when the deadline has passed
	int exhausted;      // set by ap_abort when the iteration limit is reached
	long long deadline; // CPU time of the solving thread, nanoseconds; 0 means none
	long long max_iter; // simplex iterations allowed; 0 means no limit
	long long bb_min;   // > 0: give up branching after max(root's iterations, bb_min) more
	long long root_iter; // iterations when branch and bound began (bb_started)
	int bb_started;
	int gaveup;         // set by ap_abort when the branching allowance is spent
} ap_ctrl;

// ap_cpu returns the CPU time of the calling thread: lp_solve runs on that one thread, so
// this is the solve's own CPU time whatever else the machine does.
static long long ap_cpu(void) {
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int __WINAPI ap_abort(lprec *lp, void *handle) {
	ap_ctrl *c = (ap_ctrl *)handle;
	if (__atomic_load_n(&c->cancel, __ATOMIC_RELAXED)) return TRUE;
	// lp_solve calls this at fixed points of its search and the iteration count is a
	// function of the model alone, so a stop here does not depend on the machine's load.
	if (c->max_iter > 0 && get_total_iter(lp) >= c->max_iter) {
		c->exhausted = 1;
		return TRUE;
	}
	// The branching allowance: as many iterations again as the root relaxation took
	// (at least bb_min), counted from the first branch-and-bound node.
	if (c->bb_min > 0 && get_total_nodes(lp) > 0) {
		long long it = get_total_iter(lp);
		if (!c->bb_started) {
			c->bb_started = 1;
			c->root_iter = it;
		}
		long long allow = c->root_iter > c->bb_min ? c->root_iter : c->bb_min;
		if (it - c->root_iter >= allow) {
			c->gaveup = 1;
			return TRUE;
		}
	}
	// lp_solve calls this from the thread that runs solve(), so the clock read is the
	// solve's own CPU time: the machine's load does not move the deadline.
	if (c->deadline > 0 && ap_cpu() >= c->deadline) {
		c->timedout = 1;
		return TRUE;
	}
	return FALSE;
}

static ap_ctrl *ap_new(void) { return (ap_ctrl *)calloc(1, sizeof(ap_ctrl)); }

// ap_solve installs the callback with a CPU-time limit (limit_ns <= 0: none), an
// iteration limit (<= 0: none) and a branching allowance (bb_min <= 0: none), runs solve()
// and reports the CPU time it took. Arming and solving are one C call so that both read
// the clock of the same thread.
static int ap_solve(lprec *lp, ap_ctrl *c, long long limit_ns, long long max_iter, long long bb_min, long long *cpu_ns) {
	long long start = ap_cpu();
	c->deadline = limit_ns > 0 ? start + limit_ns : 0;
	c->max_iter = max_iter > 0 ? max_iter : 0;
	c->bb_min = bb_min > 0 ? bb_min : 0;
	c->bb_started = c->gaveup = 0;
	put_abortfunc(lp, ap_abort, c);
	int code = solve(lp);
	*cpu_ns = ap_cpu() - start;
	return code;
}

static void ap_cancel(ap_ctrl *c) { __atomic_store_n(&c->cancel, 1, __ATOMIC_RELAXED); }
static int ap_timedout(ap_ctrl *c) { return c->timedout; }
static int ap_exhausted(ap_ctrl *c) { return c->exhausted; }
static int ap_gaveup(ap_ctrl *c) { return c->gaveup; }
*/
import "C"

import (
	"fmt"
	"math"
	"time"
	"unsafe"
)

// lp_solve's solve() return codes, from lp_lib.h.
const (
	lpNoMemory   = int(C.NOMEMORY)
	lpNumFailure = int(C.NUMFAILURE)
	lpAccuracy   = int(C.ACCURACYERROR)
	lpOptimal    = int(C.OPTIMAL)
	lpSubopt     = int(C.SUBOPTIMAL)
	lpInfeasible = int(C.INFEASIBLE)
	lpUnbounded  = int(C.UNBOUNDED)
	lpUserAbort  = int(C.USERABORT)
	lpTimeout    = int(C.TIMEOUT)
)

// lpCodeNames names solve()'s return codes for error messages.
var lpCodeNames = map[int]string{
	int(C.NOBFP): "NOBFP", int(C.NOMEMORY): "NOMEMORY", int(C.NOTRUN): "NOTRUN",
	int(C.OPTIMAL): "OPTIMAL", int(C.SUBOPTIMAL): "SUBOPTIMAL", int(C.INFEASIBLE): "INFEASIBLE",
	int(C.UNBOUNDED): "UNBOUNDED", int(C.DEGENERATE): "DEGENERATE", int(C.NUMFAILURE): "NUMFAILURE",
	int(C.USERABORT): "USERABORT", int(C.TIMEOUT): "TIMEOUT", int(C.RUNNING): "RUNNING",
	int(C.PRESOLVED): "PRESOLVED", int(C.ACCURACYERROR): "ACCURACYERROR",
}

// lpInfinity is what lp_solve reads as an infinite bound (its default).
const lpInfinity = 1e30

// Available reports whether this build can solve ILPs: it can, with lp_solve linked in.
// A build without cgo answers [ErrNoSolver] instead (nocgo.go).
func Available() error { return nil }

// lpModel owns one lprec and the scratch arrays used to pass rows to it.
type lpModel struct {
	lp    *C.lprec
	ncols int
	ctrl  *C.ap_ctrl

	idx   []C.int    // 1-based column numbers of the row being passed
	val   []C.double // their coefficients
	stamp []int32    // stamp[col] == rowSeq when col is already in idx
	pos   []int32    // pos[col] is col's index in idx while stamped
	seq   int32

	cpu       time.Duration // thread CPU time of the last solve
	scaleRows bool          // normalize rows and the objective (see normalize)
	objScale  float64       // lp_solve's objective row is objScale times the problem's (a power of two; 0: 1)
	colExp    []int         // column j is 2^colExp[j] times lp_solve's column (scale.go); nil: none
}

// newLPModel makes an lprec with ncols columns, no rows, quiet, minimizing.
// The caller must call free.
func newLPModel(ncols int) (*lpModel, error) {
	lp := C.make_lp(0, C.int(ncols))
	if lp == nil {
		return nil, fmt.Errorf("ilp: lp_solve make_lp(0, %d) failed", ncols)
	}
	ctrl := C.ap_new()
	if ctrl == nil {
		C.delete_lp(lp)
		return nil, fmt.Errorf("ilp: out of C memory")
	}
	C.set_verbose(lp, C.NEUTRAL)
	C.set_minim(lp)
	return &lpModel{lp: lp, ncols: ncols, ctrl: ctrl,
		stamp: make([]int32, ncols+1), pos: make([]int32, ncols+1)}, nil
}

// free releases the lprec and the abort control; the model is unusable after.
func (m *lpModel) free() {
	C.delete_lp(m.lp)
	C.free(unsafe.Pointer(m.ctrl))
	m.lp, m.ctrl = nil, nil
}

func lpBool(b bool) C.MYBOOL {
	if b {
		return 1
	}
	return 0
}

func lpBound(x float64) C.double {
	return C.double(math.Max(-lpInfinity, math.Min(lpInfinity, x)))
}

// setColumn gives column id (0-based) its bounds and kind.
func (m *lpModel) setColumn(id int, v Var) error {
	col := C.int(id + 1)
	if v.Kind == Binary {
		if C.set_binary(m.lp, col, 1) == 0 {
			return fmt.Errorf("ilp: lp_solve set_binary(%d) failed", id+1)
		}
		return nil
	}
	if v.Kind == Integer && C.set_int(m.lp, col, 1) == 0 {
		return fmt.Errorf("ilp: lp_solve set_int(%d) failed", id+1)
	}
	lo, hi := v.Lo, v.Hi
	if v.Kind == Integer {
		// lp_solve's branch and bound misjudges fractional bounds on integer columns (it
		// reported min z, z ∈ [-2.5, 7] integer, infeasible); the integral hull is the same
		// problem with the bounds rounded inwards.
		lo, hi = math.Ceil(lo), math.Floor(hi)
	}
	if m.colExp != nil {
		lo, hi = math.Ldexp(lo, -m.colExp[id]), math.Ldexp(hi, -m.colExp[id])
	}
	if C.set_bounds(m.lp, col, lpBound(lo), lpBound(hi)) == 0 {
		return fmt.Errorf("ilp: lp_solve set_bounds(%d, %g, %g) failed", id+1, v.Lo, v.Hi)
	}
	return nil
}

// load copies terms into idx/val, adding up the coefficients of a column that
// appears twice (lp_solve expects each column once) and dropping zeros.
func (m *lpModel) load(terms []Term) {
	m.idx, m.val = m.idx[:0], m.val[:0]
	m.seq++
	for _, t := range terms {
		col := int(t.Var) + 1
		if m.stamp[col] == m.seq {
			m.val[m.pos[col]] += C.double(t.Coef)
			continue
		}
		m.stamp[col], m.pos[col] = m.seq, int32(len(m.idx))
		m.idx = append(m.idx, C.int(col))
		m.val = append(m.val, C.double(t.Coef))
	}
	n := 0
	for i := range m.idx {
		if m.val[i] != 0 {
			m.idx[n], m.val[n] = m.idx[i], m.val[i]
			n++
		}
	}
	m.idx, m.val = m.idx[:n], m.val[:n]
	if m.colExp != nil {
		for i, col := range m.idx {
			m.val[i] = C.double(math.Ldexp(float64(m.val[i]), m.colExp[col-1]))
		}
	}
}

// ptrs returns C pointers to the loaded terms (nil when there are none).
func (m *lpModel) ptrs() (*C.int, *C.double) {
	if len(m.idx) == 0 {
		return nil, nil
	}
	return &m.idx[0], &m.val[0]
}

// normalize scales the loaded terms, and x with them, by the power of two that brings the
// largest coefficient into [0.5, 1): an exact change (powers of two only move the
// exponent) that keeps byte-sized memory rows and second-sized costs in one range for
// lp_solve's tolerances. It returns x scaled.
func (m *lpModel) normalize(x float64) float64 {
	big := 0.0
	for _, v := range m.val {
		big = math.Max(big, math.Abs(float64(v)))
	}
	if big == 0 {
		return x
	}
	_, e := math.Frexp(big)
	for i := range m.val {
		m.val[i] = C.double(math.Ldexp(float64(m.val[i]), -e))
	}
	return math.Ldexp(x, -e)
}

// setObjective sets the objective row; the constant is Solve's business.
func (m *lpModel) setObjective(terms []Term) error {
	m.load(terms)
	if m.scaleRows {
		m.objScale = m.normalize(1)
	}
	if len(m.idx) == 0 {
		return nil // lp_solve rejects an empty set_obj_fnex; zero is its default
	}
	idx, val := m.ptrs()
	if C.set_obj_fnex(m.lp, C.int(len(m.idx)), val, idx) == 0 {
		return fmt.Errorf("ilp: lp_solve set_obj_fnex failed")
	}
	return nil
}

// setRowMode switches lp_solve's row-entry mode, which makes adding many rows
// linear instead of quadratic; it must be off again before solving.
func (m *lpModel) setRowMode(on bool) error {
	if C.set_add_rowmode(m.lp, lpBool(on)) == 0 {
		return fmt.Errorf("ilp: lp_solve set_add_rowmode(%v) failed", on)
	}
	return nil
}

var lpSense = [...]C.int{LE: C.LE, GE: C.GE, EQ: C.EQ}

// addRow appends one constraint.
func (m *lpModel) addRow(r *Row) error {
	m.load(r.Terms)
	rhs := r.RHS
	if m.scaleRows {
		rhs = m.normalize(rhs)
	}
	idx, val := m.ptrs()
	if C.add_constraintex(m.lp, C.int(len(m.idx)), val, idx, lpSense[r.Sense], C.double(rhs)) == 0 {
		return fmt.Errorf("ilp: lp_solve add_constraintex failed")
	}
	return nil
}

// tune applies solver settings; a negative field keeps lp_solve's default.
func (m *lpModel) tune(t tuning) {
	m.scaleRows = t.scaleRows
	if t.presolve >= 0 {
		C.set_presolve(m.lp, C.int(t.presolve), C.get_presolveloops(m.lp))
	}
	if t.scaling >= 0 {
		C.set_scaling(m.lp, C.int(t.scaling))
	}
	if t.bbRule >= 0 {
		C.set_bb_rule(m.lp, C.int(t.bbRule))
	}
	if t.floor >= 0 {
		C.set_bb_floorfirst(m.lp, C.int(t.floor))
	}
	if t.improve >= 0 {
		C.set_improve(m.lp, C.int(t.improve))
	}
	if t.depth != 0 {
		C.set_bb_depthlimit(m.lp, C.int(t.depth))
	}
	if t.simplex >= 0 {
		C.set_simplextype(m.lp, C.int(t.simplex))
	}
	if t.pivoting >= 0 {
		C.set_pivoting(m.lp, C.int(t.pivoting))
	}
	if t.verbose > 0 {
		C.set_verbose(m.lp, C.int(t.verbose))
	}
	if t.crash >= 0 {
		C.set_basiscrash(m.lp, C.int(t.crash))
	}
	if t.epsPivot > 0 {
		C.set_epspivot(m.lp, C.double(t.epsPivot))
	}
	if t.epsEl > 0 {
		C.set_epsel(m.lp, C.double(t.epsEl))
	}
	if t.gapAbs > 0 {
		C.set_mip_gap(m.lp, 1, C.double(t.gapAbs))
	}
	if t.gapRel > 0 {
		C.set_mip_gap(m.lp, 0, C.double(t.gapRel))
	}
}

// setCutoff makes lp_solve's branch and bound reject every point whose objective (the
// problem's, ObjConstant excluded) is not better than cutoff: set_obj_bound, its initial
// "at least better than" value (https://lpsolve.sourceforge.net/5.5/set_obj_bound.htm).
func (m *lpModel) setCutoff(cutoff float64) {
	if m.objScale != 0 {
		cutoff *= m.objScale
	}
	C.set_obj_bound(m.lp, C.double(cutoff))
}

// solve runs lp_solve with a limit on its CPU time, one on simplex iterations and a
// branching allowance (see ap_abort; 0: none) and returns its code.
func (m *lpModel) solve(limit time.Duration, iters, bbMin int64) int {
	var cpu C.longlong
	code := int(C.ap_solve(m.lp, m.ctrl, C.longlong(limit.Nanoseconds()), C.longlong(iters), C.longlong(bbMin), &cpu))
	m.cpu = time.Duration(cpu)
	return code
}

// effort returns the last solve's thread CPU time, simplex iterations and branch-and-bound
// nodes (lp_solve's get_total_iter and get_total_nodes).
func (m *lpModel) effort() (cpu time.Duration, iters, nodes int64) {
	return m.cpu, int64(C.get_total_iter(m.lp)), int64(C.get_total_nodes(m.lp))
}

// cancel makes the running solve stop at lp_solve's next abort check. It is
// safe to call from any goroutine while the model is alive.
func (m *lpModel) cancel() { C.ap_cancel(m.ctrl) }

// timedOut reports whether the abort callback stopped the solve at the
// deadline.
func (m *lpModel) timedOut() bool { return C.ap_timedout(m.ctrl) != 0 }

// exhausted reports whether the abort callback stopped the solve at the iteration limit.
func (m *lpModel) exhausted() bool { return C.ap_exhausted(m.ctrl) != 0 }

// gaveUp reports whether the abort callback stopped the solve at the branching allowance.
func (m *lpModel) gaveUp() bool { return C.ap_gaveup(m.ctrl) != 0 }

// solutionCount returns how many improved solutions lp_solve found: zero
// means it holds no feasible point.
func (m *lpModel) solutionCount() int { return int(C.get_solutioncount(m.lp)) }

// variables returns the values of all columns of the best solution found.
func (m *lpModel) variables() ([]float64, error) {
	dst := make([]float64, m.ncols)
	if m.ncols == 0 {
		return dst, nil
	}
	if C.get_variables(m.lp, (*C.double)(unsafe.Pointer(&dst[0]))) == 0 {
		return nil, fmt.Errorf("ilp: lp_solve get_variables failed")
	}
	if m.colExp != nil {
		for j := range dst {
			dst[j] = math.Ldexp(dst[j], m.colExp[j])
		}
	}
	return dst, nil
}
