//go:build mpi

package mpi

/*
#cgo pkg-config: ompi-c
#include <stdlib.h>
#include <mpi.h>

static int ap_init(int *provided) {
	int done = 0;
	MPI_Initialized(&done);
	if (done) { MPI_Query_thread(provided); return MPI_SUCCESS; }
	int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, provided);
	if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	return rc;
}
static int ap_rank(int *r) { return MPI_Comm_rank(MPI_COMM_WORLD, r); }
static int ap_size(int *n) { return MPI_Comm_size(MPI_COMM_WORLD, n); }
static int ap_tag_ub(int *ub) {
	void *v; int flag = 0;
	int rc = MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v, &flag);
	*ub = (rc == MPI_SUCCESS && flag) ? *(int *)v : 32767;
	return rc;
}
static int ap_dup_world(MPI_Comm *out) {
	int rc = MPI_Comm_dup(MPI_COMM_WORLD, out);
	if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
	return rc;
}
static int ap_comm_create_group(int n, int *ranks, int tag, MPI_Comm *out) {
	MPI_Group world, g;
	int rc = MPI_Comm_group(MPI_COMM_WORLD, &world);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Group_incl(world, n, ranks, &g);
	if (rc == MPI_SUCCESS) {
		rc = MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, out);
		MPI_Group_free(&g);
	}
	MPI_Group_free(&world);
	if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
	return rc;
}
static int ap_isend(void *buf, int n, int dest, int tag, MPI_Comm c, MPI_Request *r) {
	return MPI_Isend(buf, n, MPI_BYTE, dest, tag, c, r);
}
static int ap_improbe(int src, int tag, MPI_Comm c, int *flag, MPI_Message *m, int *count) {
	MPI_Status st;
	int rc = MPI_Improbe(src, tag, c, flag, m, &st);
	if (rc == MPI_SUCCESS && *flag) rc = MPI_Get_count(&st, MPI_BYTE, count);
	return rc;
}
static int ap_iprobe_any(MPI_Comm c, int *flag, int *src, int *tag) {
	MPI_Status st;
	int rc = MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c, flag, &st);
	if (rc == MPI_SUCCESS && *flag) { *src = st.MPI_SOURCE; *tag = st.MPI_TAG; }
	return rc;
}
static int ap_mrecv(void *buf, int n, MPI_Message *m) {
	return MPI_Mrecv(buf, n, MPI_BYTE, m, MPI_STATUS_IGNORE);
}
static int ap_test(MPI_Request *r, int *flag) { return MPI_Test(r, flag, MPI_STATUS_IGNORE); }
static int ap_ibarrier(MPI_Comm c, MPI_Request *r) { return MPI_Ibarrier(c, r); }
static int ap_ibcast(void *buf, int n, int root, MPI_Comm c, MPI_Request *r) {
	return MPI_Ibcast(buf, n, MPI_BYTE, root, c, r);
}
static int ap_iallgather_i64(long long *mine, long long *all, MPI_Comm c, MPI_Request *r) {
	return MPI_Iallgather(mine, 1, MPI_LONG_LONG, all, 1, MPI_LONG_LONG, c, r);
}
static int ap_iallgatherv(void *mine, int n, void *all, int *counts, int *displs, MPI_Comm c, MPI_Request *r) {
	return MPI_Iallgatherv(mine, n, MPI_BYTE, all, counts, displs, MPI_BYTE, c, r);
}
static int ap_abort(int code) { return MPI_Abort(MPI_COMM_WORLD, code); }
static int ap_finalize(void) {
	int done = 0;
	MPI_Finalized(&done);
	return done ? MPI_SUCCESS : MPI_Finalize();
}
static void ap_error_string(int code, char *buf) {
	int n = 0;
	MPI_Error_string(code, buf, &n);
	buf[n] = 0;
}
static int ap_max_error_string(void) { return MPI_MAX_ERROR_STRING; }
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/autopar/autopar/program"
)

// Available reports whether this build links Open MPI (it was built with -tags mpi).
func Available() bool { return true }

// World is this process's MPI library: MPI_COMM_WORLD and the lock that serializes calls
// into it (MPI is initialized at MPI_THREAD_SERIALIZED: goroutines move between OS threads,
// so every call holds mu, and none blocks while holding it).
type World struct {
	mu         sync.Mutex
	rank, size int
	tagUB      int
	coll       C.MPI_Comm // a duplicate of MPI_COMM_WORLD for this package's setup collectives
	finalized  bool
}

var (
	initOnce  sync.Once
	initWorld *World
	initErr   error
)

// Init initializes MPI once per process and returns the world; later calls return the same.
// A process started without mpirun is a world of one rank (MPI's singleton init).
func Init() (*World, error) {
	initOnce.Do(func() {
		var provided C.int
		if rc := C.ap_init(&provided); rc != C.MPI_SUCCESS {
			initErr = fmt.Errorf("mpi: MPI_Init_thread: %s", errString(rc))
			return
		}
		if provided < C.MPI_THREAD_SERIALIZED {
			initErr = fmt.Errorf("mpi: MPI_Init_thread gave thread level %d, expected MPI_THREAD_SERIALIZED", int(provided))
			return
		}
		w := &World{}
		var r, n, ub C.int
		C.ap_rank(&r)
		C.ap_size(&n)
		C.ap_tag_ub(&ub)
		w.rank, w.size, w.tagUB = int(r), int(n), int(ub)
		if rc := C.ap_dup_world(&w.coll); rc != C.MPI_SUCCESS {
			initErr = fmt.Errorf("mpi: MPI_Comm_dup: %s", errString(rc))
			return
		}
		initWorld = w
	})
	return initWorld, initErr
}

// Rank is this process's rank in MPI_COMM_WORLD; it runs device Rank.
func (w *World) Rank() int { return w.rank }

// Size is the number of ranks.
func (w *World) Size() int { return w.size }

// Finalize shuts MPI down; call it once every rank is done (it is collective).
func (w *World) Finalize() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finalized {
		return nil
	}
	w.finalized = true
	if rc := C.ap_finalize(); rc != C.MPI_SUCCESS {
		return fmt.Errorf("mpi: MPI_Finalize: %s", errString(rc))
	}
	return nil
}

// Abort ends every rank of the job with the exit code (MPI_Abort): what a rank does after
// an error, so that no peer waits for it. It does not return.
func (w *World) Abort(code int) {
	// No lock: another goroutine may hold it while polling, and abort must not wait.
	C.ap_abort(C.int(code))
	panic("mpi: MPI_Abort returned")
}

func errString(rc C.int) string {
	buf := (*C.char)(C.malloc(C.size_t(C.ap_max_error_string() + 1)))
	defer C.free(unsafe.Pointer(buf))
	C.ap_error_string(rc, buf)
	return C.GoString(buf)
}

// call runs one MPI call under the lock and turns its return code into an error naming it.
func (w *World) call(what string, f func() C.int) error {
	w.mu.Lock()
	rc := f()
	w.mu.Unlock()
	if rc != C.MPI_SUCCESS {
		return fmt.Errorf("mpi: %s: %s", what, errString(rc))
	}
	return nil
}

// poll calls done until it reports true, an error, or ctx ends, backing off from busy
// polling to sleeps of up to half a millisecond so that waiting ranks leave the cores to
// the ranks computing (mpirun --oversubscribe puts several on one core).
func poll(ctx context.Context, done func() (bool, error)) error {
	for i := 0; ; i++ {
		ok, err := done()
		if ok || err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		switch {
		case i < 64:
		case i < 256:
			time.Sleep(10 * time.Microsecond)
		default:
			time.Sleep(time.Duration(min(500, 10*(i-255))) * time.Microsecond)
		}
	}
}

// wait polls request r to completion under ctx. A request ctx ends is left as it is (MPI
// cannot cancel a collective): the caller aborts the job.
func (w *World) wait(ctx context.Context, what string, r *C.MPI_Request) error {
	return poll(ctx, func() (bool, error) {
		var flag C.int
		err := w.call(what, func() C.int { return C.ap_test(r, &flag) })
		return flag != 0, err
	})
}

// Barrier returns once every rank has called it (MPI_Ibarrier), or with ctx's error.
func (w *World) Barrier(ctx context.Context) error {
	var r C.MPI_Request
	if err := w.call("MPI_Ibarrier", func() C.int { return C.ap_ibarrier(w.coll, &r) }); err != nil {
		return err
	}
	return w.wait(ctx, "MPI_Ibarrier", &r)
}

// arena holds the C buffers of one setup collective. They are freed once it returns
// successfully; after a failure (a timeout) MPI may still write into them, so they are left
// to the MPI_Abort that follows.
type arena struct{ ptrs []unsafe.Pointer }

func (a *arena) alloc(n int) unsafe.Pointer {
	p := C.malloc(C.size_t(max(n, 1)))
	a.ptrs = append(a.ptrs, p)
	return p
}

func (a *arena) release(err *error) {
	if *err != nil {
		return
	}
	for _, p := range a.ptrs {
		C.free(p)
	}
}

// Bcast returns root's data on every rank (MPI_Ibcast of the length, then of the bytes);
// the data of other ranks is ignored.
func (w *World) Bcast(ctx context.Context, root int, data []byte) (_ []byte, err error) {
	var a arena
	defer a.release(&err)
	n := a.alloc(8)
	*(*int64)(n) = int64(len(data))
	var r C.MPI_Request
	if err := w.call("MPI_Ibcast", func() C.int { return C.ap_ibcast(n, 8, C.int(root), w.coll, &r) }); err != nil {
		return nil, err
	}
	if err := w.wait(ctx, "MPI_Ibcast", &r); err != nil {
		return nil, err
	}
	size := *(*int64)(n)
	if size > math.MaxInt32 {
		return nil, fmt.Errorf("mpi: broadcast of %d bytes, more than MPI's int count allows", size)
	}
	buf := a.alloc(int(size))
	if w.rank == root {
		copy(unsafe.Slice((*byte)(buf), size), data)
	}
	if err := w.call("MPI_Ibcast", func() C.int { return C.ap_ibcast(buf, C.int(size), C.int(root), w.coll, &r) }); err != nil {
		return nil, err
	}
	if err := w.wait(ctx, "MPI_Ibcast", &r); err != nil {
		return nil, err
	}
	return C.GoBytes(buf, C.int(size)), nil
}

// Allgather returns every rank's data, by rank (MPI_Iallgather of the lengths, then
// MPI_Iallgatherv of the bytes).
func (w *World) Allgather(ctx context.Context, data []byte) (_ [][]byte, err error) {
	var a arena
	defer a.release(&err)
	lens := (*C.longlong)(a.alloc(8 * (w.size + 1)))
	all := unsafe.Slice(lens, w.size+1)
	all[w.size] = C.longlong(len(data))
	var r C.MPI_Request
	if err := w.call("MPI_Iallgather", func() C.int { return C.ap_iallgather_i64(&all[w.size], lens, w.coll, &r) }); err != nil {
		return nil, err
	}
	if err := w.wait(ctx, "MPI_Iallgather", &r); err != nil {
		return nil, err
	}
	counts := (*C.int)(a.alloc(4 * 2 * w.size))
	cs := unsafe.Slice(counts, 2*w.size) // counts, then displacements
	var total int64
	for i := range w.size {
		if total+int64(all[i]) > math.MaxInt32 {
			return nil, fmt.Errorf("mpi: gathering %d bytes, more than MPI's int count allows", total+int64(all[i]))
		}
		cs[i], cs[w.size+i] = C.int(all[i]), C.int(total)
		total += int64(all[i])
	}
	mine := a.alloc(len(data))
	copy(unsafe.Slice((*byte)(mine), len(data)), data)
	out := a.alloc(int(total))
	if err := w.call("MPI_Iallgatherv", func() C.int {
		return C.ap_iallgatherv(mine, C.int(len(data)), out, counts, &cs[w.size], w.coll, &r)
	}); err != nil {
		return nil, err
	}
	if err := w.wait(ctx, "MPI_Iallgatherv", &r); err != nil {
		return nil, err
	}
	res := make([][]byte, w.size)
	for i := range w.size {
		res[i] = C.GoBytes(unsafe.Add(out, int(cs[w.size+i])), cs[i])
	}
	return res, nil
}

// comm is a communicator handle.
type comm C.MPI_Comm

// dupWorld duplicates MPI_COMM_WORLD, so that one use's messages never match another's.
func (w *World) dupWorld() (comm, error) {
	var c C.MPI_Comm
	err := w.call("MPI_Comm_dup", func() C.int { return C.ap_dup_world(&c) })
	return comm(c), err
}

// createGroup makes the communicator of the world ranks given, in that order
// (MPI_Comm_create_group): collective over those ranks only, matched by tag.
func (w *World) createGroup(ranks []int, tag int) (comm, error) {
	cr := (*C.int)(C.malloc(C.size_t(4 * len(ranks))))
	defer C.free(unsafe.Pointer(cr))
	for i, r := range ranks {
		unsafe.Slice(cr, len(ranks))[i] = C.int(r)
	}
	var c C.MPI_Comm
	err := w.call("MPI_Comm_create_group", func() C.int { return C.ap_comm_create_group(C.int(len(ranks)), cr, C.int(tag), &c) })
	return comm(c), err
}

// sendReq is a message in flight: its C buffer lives until the send completes.
type sendReq struct {
	buf unsafe.Pointer
	req C.MPI_Request
}

// sendBuffer allocates n bytes of C memory for a message.
func sendBuffer(n int) (unsafe.Pointer, []byte) {
	p := C.malloc(C.size_t(max(n, 1)))
	return p, unsafe.Slice((*byte)(p), n)
}

// isend starts sending the n bytes at buf (from sendBuffer, which the request now owns).
func (w *World) isend(c comm, dest, tag int, buf unsafe.Pointer, n int) (*sendReq, error) {
	if n > math.MaxInt32 {
		C.free(buf)
		return nil, fmt.Errorf("mpi: a message of %d bytes, more than MPI's int count allows", n)
	}
	s := &sendReq{buf: buf}
	if err := w.call("MPI_Isend", func() C.int {
		return C.ap_isend(buf, C.int(n), C.int(dest), C.int(tag), C.MPI_Comm(c), &s.req)
	}); err != nil {
		C.free(buf)
		return nil, err
	}
	return s, nil
}

// done tests s and frees its buffer once it completed.
func (w *World) done(s *sendReq) (bool, error) {
	if s.buf == nil {
		return true, nil
	}
	var flag C.int
	if err := w.call("MPI_Test", func() C.int { return C.ap_test(&s.req, &flag) }); err != nil {
		return false, err
	}
	if flag != 0 {
		C.free(s.buf)
		s.buf = nil
	}
	return flag != 0, nil
}

// tryRecv receives the next message from src under tag on c if one has arrived
// (MPI_Improbe, then MPI_Mrecv into a buffer of its size).
func (w *World) tryRecv(c comm, src, tag int) ([]byte, bool, error) {
	var (
		flag, count C.int
		msg         C.MPI_Message
	)
	if err := w.call("MPI_Improbe", func() C.int {
		return C.ap_improbe(C.int(src), C.int(tag), C.MPI_Comm(c), &flag, &msg, &count)
	}); err != nil || flag == 0 {
		return nil, false, err
	}
	buf := make([]byte, max(int(count), 1))
	err := w.call("MPI_Mrecv", func() C.int { return C.ap_mrecv(unsafe.Pointer(&buf[0]), count, &msg) })
	return buf[:count], err == nil, err
}

// probeAny reports a message waiting on c from anyone, without receiving it.
func (w *World) probeAny(c comm) (src, tag int, ok bool, err error) {
	var flag, s, t C.int
	err = w.call("MPI_Iprobe", func() C.int { return C.ap_iprobe_any(C.MPI_Comm(c), &flag, &s, &t) })
	return int(s), int(t), flag != 0, err
}

func (w *World) newTransport(programs []*program.Program) (rankTransport, error) {
	t, err := w.NewTransport(programs)
	if err != nil {
		return nil, err
	}
	return t, nil
}
