package load

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Progress draws a one-line status of the current run on a terminal. A nil
// *Progress, or one that is off, draws nothing, so callers need no checks.
type Progress struct {
	w  io.Writer // immutable
	on bool      // immutable

	mu    sync.Mutex
	label string        // guarded by mu
	stop  chan struct{} // guarded by mu: closed by End to stop the drawing goroutine
	done  chan struct{} // guarded by mu: closed when the drawing goroutine returns
}

// NewProgress returns a display on w that draws only when on is set.
func NewProgress(w io.Writer, on bool) *Progress { return &Progress{w: w, on: on} }

// IsTerminal reports whether f is a character device, as a terminal is.
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// SetLabel names what the next Begin measures and returns the label it
// replaces.
func (p *Progress) SetLabel(label string) (old string) {
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old, p.label = p.label, label
	return old
}

// Begin starts redrawing the status line four times a second: the label,
// the time elapsed (of expected, when known) and, unless count is nil,
// count(), the jobs done so far, with their rate.
func (p *Progress) Begin(expected time.Duration, count func() int64) {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	label, stop, done := p.label, p.stop, p.done
	go func() {
		defer close(done)
		start := time.Now()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		var lastN int64
		lastT := start
		rate := 0.0
		for {
			select {
			case <-stop:
				fmt.Fprint(p.w, "\r\033[K")
				return
			case now := <-tick.C:
				elapsed := now.Sub(start).Round(100 * time.Millisecond)
				clock := elapsed.String()
				if expected > 0 {
					clock += " / " + expected.String()
				}
				if count == nil {
					fmt.Fprintf(p.w, "\r\033[K%s  %s", label, clock)
					continue
				}
				n := count()
				if dt := now.Sub(lastT).Seconds(); dt > 0 {
					rate = float64(n-lastN) / dt
				}
				lastN, lastT = n, now
				fmt.Fprintf(p.w, "\r\033[K%s  %s  %s done  %s/s", label, clock, FormatCount(float64(n)), FormatCount(rate))
			}
		}
	}()
}

// End stops the status line and clears it.
func (p *Progress) End() {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	stop, done := p.stop, p.done
	p.stop, p.done = nil, nil
	p.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// Printf prints a line of its own when the display is on.
func (p *Progress) Printf(format string, args ...any) {
	if p == nil || !p.on {
		return
	}
	fmt.Fprintf(p.w, "\r\033[K"+format+"\n", args...)
}
