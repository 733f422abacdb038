package engine_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/hostinfo"
)

// Resolve fills every default from the host it is given, and only the
// fields left at zero.
func TestConfigResolve(t *testing.T) {
	const mib = 1 << 20
	host := hostinfo.Host{CPUs: 8, OpenFileLimit: 20000, OpenDescriptors: 10, MemTotal: 16 << 30,
		CgroupMemory: 1 << 30, CgroupDir: "/sys/fs/cgroup"}
	got := engine.Config{}.Resolve(host)
	want := engine.Config{
		Network:           "tcp",
		MaxJobSize:        engine.DefaultMaxJobSize,
		MaxInputBuffered:  2 * (engine.DefaultMaxJobSize + 256),
		MaxOutputBuffered: engine.DefaultMaxOutputBuffered,
		Loops:             7,
		MaxConnections:    20000 - 10 - 64,
		MaxBufferMemory:   128 * mib, // an eighth of the cgroup's 1 GiB
		DrainPoll:         5 * time.Millisecond,
		Version:           "unknown",
	}.Resolve(hostinfo.Host{}) // every field set: only marks it resolved
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Resolve:\n%+v\nwant\n%+v", got, want)
	}
	if again := got.Resolve(hostinfo.Host{}); !reflect.DeepEqual(again, got) {
		t.Errorf("resolving again changed\n%+v\ninto\n%+v", got, again)
	}

	set := engine.Config{Network: "unix", MaxJobSize: 10, Loops: 1000, MaxConnections: 3,
		MaxBufferMemory: 5, Version: "1.2.3"}.Resolve(host)
	if set.Network != "unix" || set.MaxJobSize != 10 || set.MaxInputBuffered != 64<<10 ||
		set.Loops != engine.MaxLoops || set.MaxConnections != 3 || set.MaxBufferMemory != 5 || set.Version != "1.2.3" {
		t.Errorf("Resolve overrode what was set, or did not cap the loops: %+v", set)
	}

	for _, c := range []struct {
		host hostinfo.Host
		want int64
	}{
		{hostinfo.Host{MemTotal: 16 << 30}, 1 << 30},                           // the machine's, capped
		{hostinfo.Host{MemTotal: 16 << 30, CgroupMemory: 256 * mib}, 64 * mib}, // the floor
		{hostinfo.Host{MemTotal: 4 << 30, CgroupMemory: 8 << 30}, 512 * mib},   // the machine is smaller
		{hostinfo.Host{}, 256 * mib},                                           // unknown
	} {
		if got := (engine.Config{}).Resolve(c.host).MaxBufferMemory; got != c.want {
			t.Errorf("buffer memory for %+v: %d, want %d", c.host, got, c.want)
		}
	}
	if got := (engine.Config{}).Resolve(hostinfo.Host{}); got.Loops != 1 || got.MaxConnections != 1<<20 {
		t.Errorf("unknown host: %d loops, %d connections; want 1 and 2^20", got.Loops, got.MaxConnections)
	}
}
