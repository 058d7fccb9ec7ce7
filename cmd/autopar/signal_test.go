package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A real SIGINT, sent to this process once cli catches signals, stops a manual-plan
// compile that writes programs: status 130, "interrupted" on stderr, no output directory.
func TestInterruptExits130AndWritesNothing(t *testing.T) {
	// The signal is delivered asynchronously: wait until it has cancelled, or a loaded
	// machine may let the compile finish first (the status would then be 0).
	afterNotify = func(ctx context.Context) {
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Error("SIGINT did not cancel the command's context")
		}
	}
	t.Cleanup(func() { afterNotify = func(context.Context) {} })
	dir := filepath.Join(t.TempDir(), "out")
	var out, errOut bytes.Buffer
	status := cli([]string{"compile", "../../testdata/models/gpt-tiny.ir", "--cluster", "cpu:2", "--plan", "tp=2",
		"--microbatches", "2", "-o", dir, "--emit", "programs"}, &out, &errOut)
	assert.Equal(t, exitInterrupted, status, errOut.String())
	assert.Contains(t, errOut.String(), "autopar: interrupted")
	assert.NotContains(t, errOut.String(), "context canceled")
	assert.NoDirExists(t, dir)
}

func TestCLIStatus(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, 0, cli([]string{"model", "mlp"}, &out, &errOut))
	assert.Contains(t, out.String(), "matmul")
	assert.Equal(t, exitError, cli([]string{"compile", "nope.ir", "--cluster", "cpu:2"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "autopar: ")
}

// The first signal cancels and leaves the status; the second exits at once with it.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	exited := make(chan int, 1)
	exit = func(code int) { exited <- code }
	t.Cleanup(func() { exit = os.Exit })
	sigs, done, status := make(chan os.Signal, 2), make(chan struct{}), make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var errOut syncBuffer
	go watchSignals(sigs, done, cancel, status, &errOut)
	sigs <- syscall.SIGTERM
	<-ctx.Done()
	assert.Equal(t, exitTerminated, <-status)
	sigs <- os.Interrupt
	select {
	case code := <-exited:
		assert.Equal(t, exitInterrupted, code)
	case <-time.After(5 * time.Second):
		t.Fatal("a second signal did not exit")
	}
	close(done)
	assert.Contains(t, errOut.String(), "interrupted again")
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader on different goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A SIGINT in the middle of a compile (once progress shows it building the training step)
// stops it the same way.
func TestInterruptMidCompile(t *testing.T) {
	progressInterval = time.Millisecond
	t.Cleanup(func() { progressInterval = 5 * time.Second })
	var errOut syncBuffer
	afterNotify = func(context.Context) {
		go func() {
			for !strings.Contains(errOut.String(), "building the training step") {
				time.Sleep(time.Millisecond)
			}
			_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
		}()
	}
	t.Cleanup(func() { afterNotify = func(context.Context) {} })
	dir := filepath.Join(t.TempDir(), "out")
	var out bytes.Buffer
	status := cli([]string{"compile", "../../testdata/models/gpt-tiny.ir", "--cluster", "cpu:2", "--plan", "tp=2",
		"--microbatches", "2", "-o", dir, "--emit", "programs"}, &out, &errOut)
	assert.Equal(t, exitInterrupted, status, errOut.String())
	assert.Contains(t, errOut.String(), "autopar: interrupted")
	assert.NoDirExists(t, dir)
	assert.Empty(t, out.String(), "no summary: the compile did not finish")
}
