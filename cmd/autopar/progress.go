package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressInterval is how often progress lines are written when stderr is not a terminal.
var progressInterval = 5 * time.Second

// progress shows that a long command is alive. On a terminal it draws a bar that the
// search's callbacks move; elsewhere (a log, a CI job, a pipe) it writes one line every
// progressInterval naming the phase, its count and the time so far, so that a compile of a
// huge model is never minutes of silence. --quiet turns both off. A nil *progress does
// nothing.
type progress struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	start time.Time

	mu                        sync.Mutex
	phase                     string
	microbatches, done, total int

	stop chan struct{}
	wg   sync.WaitGroup
}

// startProgress starts reporting on stderr, or returns nil when quiet.
func startProgress(stderr io.Writer, quiet bool) *progress {
	if quiet {
		return nil
	}
	p := &progress{w: stderr, start: time.Now(), phase: "starting"}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(1, progressbar.OptionSetWriter(stderr), progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionSetPredictTime(true))
		return p
	}
	p.stop = make(chan struct{})
	p.wg.Add(1)
	go p.tick()
	return p
}

// tick writes a line every progressInterval until stop closes.
func (p *progress) tick() {
	defer p.wg.Done()
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			fmt.Fprintln(p.w, p.line())
		}
	}
}

// line is the progress line for now: "autopar: 15s: sharding ILPs 12/40, 4 micro-batches".
func (p *progress) line() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := fmt.Sprintf("autopar: %v: %s", time.Since(p.start).Round(time.Second), p.phase)
	if p.total > 0 {
		s += fmt.Sprintf(" %d/%d", p.done, p.total)
	}
	if p.microbatches > 0 {
		s += fmt.Sprintf(", %d micro-batches", p.microbatches)
	}
	return s
}

// setPhase names a phase with no count of its own ("reading the model", "writing out").
func (p *progress) setPhase(phase string) { p.set(0, phase, 0, 0) }

// set records the search's progress; it has Options.Progress's signature.
func (p *progress) set(microbatches int, phase string, done, total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.phase, p.microbatches, p.done, p.total = phase, microbatches, done, total
	p.mu.Unlock()
	if p.bar != nil && total > 0 {
		p.bar.ChangeMax(total)
		desc := phase // the sharding ILPs of every micro-batch count run together (count 0)
		if microbatches > 0 {
			desc = fmt.Sprintf("%s, %d micro-batches", phase, microbatches)
		}
		p.bar.Describe(desc)
		_ = p.bar.Set(done)
	}
}

// close stops reporting and clears the bar; no line is written after it returns.
func (p *progress) close() {
	if p == nil {
		return
	}
	if p.bar != nil {
		_ = p.bar.Clear()
		return
	}
	close(p.stop)
	p.wg.Wait()
}
