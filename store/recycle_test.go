package store_test

import (
	"bytes"
	"testing"

	"github.com/sproutmq/sprout/store"
)

// The recycler gets the body of every large job the store forgets, by any
// path, once and after the job is gone; small bodies live inside their jobs
// and are never handed out.
func TestRecycler(t *testing.T) {
	s := store.New(store.Options{})
	defer s.Close()
	var got [][]byte
	s.SetRecycler(func(body []byte) { got = append(got, body) })
	c := s.NewClient(nil)
	defer c.Close()
	big := func(b byte) []byte { return append(bytes.Repeat([]byte{b}, 1000), '\r', '\n') }

	put := func(body []byte) *store.Job {
		j, err := c.Put(s.NextID(), 0, 0, 60, body)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	small := put([]byte("small\r\n"))
	ready, reserved, cleared := put(big('a')), put(big('b')), put(big('c'))
	if !c.Delete(small.ID()) || len(got) != 0 {
		t.Fatalf("deleting a small job recycled %d bodies", len(got))
	}
	if !c.Alive(ready) || !c.Delete(ready.ID()) {
		t.Fatal("delete of a ready job failed")
	}
	if c.Alive(ready) {
		t.Error("a deleted job is alive")
	}
	if j, r := c.Reserve(0); r != store.Reserved || j != reserved || !c.Delete(j.ID()) {
		t.Fatal("reserve and delete failed")
	}
	if n, ok := c.ClearTube([]byte(store.DefaultTube), []store.State{store.StateReady}, nil); !ok || n != 1 {
		t.Fatalf("clear: %d, %v", n, ok)
	}
	want := [][]byte{ready.Body(), reserved.Body(), cleared.Body()}
	if len(got) != len(want) {
		t.Fatalf("%d bodies recycled, want %d", len(got), len(want))
	}
	for i := range want {
		if &got[i][0] != &want[i][0] || len(got[i]) != len(want[i]) {
			t.Errorf("recycled body %d is not the job's own", i)
		}
	}
}
