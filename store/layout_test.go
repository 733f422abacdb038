package store

import (
	"slices"
	"testing"
	"unsafe"
)

// sizeClasses are Go's allocation size classes up to 512 bytes
// (internal/runtime/gc/sizeclasses.go).
var sizeClasses = []uintptr{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192,
	208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512}

// TestJobSize keeps a Job at 120 bytes: a job with a 64-byte body (66 with
// "\r\n") then takes one 192-byte allocation. One byte more costs every
// such job 16 bytes (the next class is 208).
func TestJobSize(t *testing.T) {
	if n := unsafe.Sizeof(Job{}); n > 120 {
		t.Errorf("a Job is %d bytes; reorder or shrink its fields to stay within 120", n)
	}
}

// TestInlineClasses checks that each job type with room for a body fills
// a size class exactly, and that the rooms grow.
func TestInlineClasses(t *testing.T) {
	prev := 0
	for _, c := range inlineClasses {
		j, room := c.alloc()
		if len(room) != c.room || c.room <= prev {
			t.Errorf("class with room %d: %d bytes of room, after %d", c.room, len(room), prev)
		}
		prev = c.room
		size := uintptr(unsafe.Pointer(&room[len(room)-1])) + 1 - uintptr(unsafe.Pointer(j))
		if !slices.Contains(sizeClasses, size) {
			t.Errorf("a job with %d bytes of room takes %d bytes, not a size class", c.room, size)
		}
	}
	if prev != MaxCopiedBody {
		t.Errorf("the largest room is %d, MaxCopiedBody %d", prev, MaxCopiedBody)
	}
}

// TestNewJob checks the body of every length up to past MaxCopiedBody:
// copied in where it fits, kept otherwise.
func TestNewJob(t *testing.T) {
	for n := range MaxCopiedBody + 10 {
		body := make([]byte, n)
		for i := range body {
			body[i] = byte(n + i)
		}
		j := newJob(body)
		got := j.Body()
		if string(got) != string(body) {
			t.Fatalf("%d bytes: body differs", n)
		}
		copied := n > 0 && &got[0] != &body[0]
		if want := n > 0 && n <= MaxCopiedBody; copied != want {
			t.Errorf("%d bytes: copied %v, want %v", n, copied, want)
		}
		if copied {
			// In the job's own allocation, right after the Job.
			if off := uintptr(unsafe.Pointer(&got[0])) - uintptr(unsafe.Pointer(j)); off != unsafe.Sizeof(Job{}) {
				t.Errorf("%d bytes: body at offset %d of the job", n, off)
			}
		}
	}
}

// TestShardSize keeps id index shards apart (see jobShard): 64 bytes from
// the end of one shard's fields to the next shard's lock.
func TestShardSize(t *testing.T) {
	var sh jobShard
	end := unsafe.Offsetof(sh.sparse) + unsafe.Sizeof(sh.sparse)
	if gap := unsafe.Sizeof(sh) - end; gap < 64 {
		t.Errorf("a jobShard leaves %d bytes after its fields, want 64", gap)
	}
}

// TestWaiterSizeClass keeps a waiter, which every connection blocked in
// reserve has, in the 96-byte size class.
func TestWaiterSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(waiter{}); n > 96 {
		t.Errorf("a waiter is %d bytes; shrink it to stay within 96", n)
	}
}

// TestClientSize: every connection embeds a Client (in the engine's
// session, which must stay within 160 bytes).
func TestClientSize(t *testing.T) {
	if n := unsafe.Sizeof(Client{}); n > 96 {
		t.Errorf("a Client is %d bytes; keep what idle clients do not need behind a pointer", n)
	}
}
