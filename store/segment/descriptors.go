package segment

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// reservedDescriptors is how many descriptors the log keeps in reserve.
const reservedDescriptors = 2

// descriptorReserve keeps a few descriptors open on /dev/null for the log.
// When the process reaches its open-file limit (a flood of connections, for
// example), the log gives one back and opens the file it needs in its
// place, so a new segment can still be made and rotation still happens.
type descriptorReserve struct {
	mu   sync.Mutex
	held []*os.File // guarded by mu
}

// fill tops the reserve up; where no descriptor is free it stays short and
// is topped up on a later call.
func (r *descriptorReserve) fill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.held) < reservedDescriptors {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return
		}
		r.held = append(r.held, f)
	}
}

// open calls open, and while it fails for want of descriptors, frees one
// from the reserve and calls it again.
func (r *descriptorReserve) open(open func() (*os.File, error)) (*os.File, error) {
	f, err := open()
	for err != nil && outOfDescriptors(err) && r.release() {
		f, err = open()
	}
	return f, err
}

// release closes one reserved descriptor; false if none is left.
func (r *descriptorReserve) release() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.held)
	if n == 0 {
		return false
	}
	_ = r.held[n-1].Close()
	r.held = r.held[:n-1]
	return true
}

func (r *descriptorReserve) close() {
	for r.release() {
	}
}

func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
