package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/store"
)

// TestPingReachesEveryLoop: Ping finds every event loop of an idle server,
// and the connections it used to find them are not the clients' (not in
// stats, not served).
func TestPingReachesEveryLoop(t *testing.T) {
	for _, loops := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(loops, " loops"), func(t *testing.T) {
			srv, network, addr := startServer(t, engine.Config{Loops: loops})
			if n := srv.EventLoopCount(); n != loops {
				t.Fatalf("Ping reaches %d event loops, want %d", n, loops)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := srv.Ping(ctx); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			if st := srv.Stats(); st.CurrentConnections != 0 || st.TotalConnections != 0 {
				t.Fatalf("after start: %d connections open, %d in all; want none",
					st.CurrentConnections, st.TotalConnections)
			}
			c := dialRaw(t, network, addr)
			c.send("list-tube-used\r\n")
			c.expect("USING default\r\n")
		})
	}
}

// TestPingStuckLoop: a loop that does not run Ping's task within the
// deadline fails it, whichever loop it is; once it is free Ping passes.
func TestPingStuckLoop(t *testing.T) {
	srv, _, _ := startServer(t, engine.Config{Loops: 3})
	for i := range srv.EventLoopCount() {
		release := srv.BlockLoop(i)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := srv.Ping(ctx)
		cancel()
		release()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("loop %d blocked: Ping = %v, want a deadline error", i, err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		if err := srv.Ping(ctx); err != nil {
			t.Errorf("loop %d released: Ping = %v", i, err)
		}
		cancel()
	}
}

// TestPingNotServing: Ping says ErrNotServing before Run and after Stop.
func TestPingNotServing(t *testing.T) {
	st := store.New(store.Options{})
	defer st.Close()
	srv := engine.New(engine.Config{Address: freePort(t), Loops: 1}, st)
	if err := srv.Ping(context.Background()); !errors.Is(err, engine.ErrNotServing) {
		t.Fatalf("before Run: Ping = %v", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Run() }()
	<-srv.Ready()
	if err := srv.Ping(context.Background()); err != nil {
		t.Fatalf("running: Ping = %v", err)
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := srv.Ping(context.Background()); !errors.Is(err, engine.ErrNotServing) {
		t.Fatalf("after Stop: Ping = %v", err)
	}
}

func TestDrainingAccessor(t *testing.T) {
	srv, _, _ := startServer(t, engine.Config{})
	if srv.Draining() {
		t.Fatal("draining at start")
	}
	srv.SetDraining()
	if !srv.Draining() {
		t.Fatal("not draining after SetDraining")
	}
}
