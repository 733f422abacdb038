package segment

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// TestDescriptorReserve: an open that fails for want of descriptors is
// retried after giving one back from the reserve, as many times as the
// reserve allows; other errors are not retried; fill restores the reserve.
func TestDescriptorReserve(t *testing.T) {
	var r descriptorReserve
	r.fill()
	defer r.close()
	if len(r.held) != reservedDescriptors {
		t.Fatalf("reserve holds %d, want %d", len(r.held), reservedDescriptors)
	}
	failures := 1
	f, err := r.open(func() (*os.File, error) {
		if failures > 0 {
			failures--
			return nil, &os.PathError{Op: "open", Path: "x", Err: syscall.EMFILE}
		}
		return os.Open(os.DevNull)
	})
	if err != nil {
		t.Fatalf("open after one EMFILE: %v", err)
	}
	_ = f.Close()
	if len(r.held) != reservedDescriptors-1 {
		t.Fatalf("reserve holds %d after use, want %d", len(r.held), reservedDescriptors-1)
	}

	calls := 0
	_, err = r.open(func() (*os.File, error) {
		calls++
		return nil, fmt.Errorf("wrapped: %w", syscall.ENFILE)
	})
	if err == nil || calls != reservedDescriptors {
		t.Fatalf("a reserve of %d allowed %d attempts (err %v)", reservedDescriptors-1, calls, err)
	}
	if len(r.held) != 0 {
		t.Fatalf("reserve holds %d, want it spent", len(r.held))
	}
	calls = 0
	r.fill()
	if _, err = r.open(func() (*os.File, error) { calls++; return nil, syscall.ENOSPC }); err == nil || calls != 1 {
		t.Fatalf("ENOSPC was retried %d times", calls)
	}
	if len(r.held) != reservedDescriptors {
		t.Fatalf("fill left %d", len(r.held))
	}
}
