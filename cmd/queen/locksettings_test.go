package main

import (
	"runtime/debug"
	"testing"
	"time"

	"github.com/queen-mq/queen-go/cmd/queen/internal/broker"
	"github.com/queen-mq/queen-go/persistence"
)

// TestLockSettings: QUEEN_LOCK_TIMEOUT is a Go duration from 1ms to 10m,
// default 5s; a bad value stops the start with an error naming it.
func TestLockSettings(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
		bad  bool
	}{
		{"", persistence.DefaultLockTimeout, false},
		{"300ms", 300 * time.Millisecond, false},
		{"2m", 2 * time.Minute, false},
		{"5", 0, true},
		{"0s", 0, true},
		{"11m", 0, true},
	} {
		t.Setenv("QUEEN_LOCK_TIMEOUT", c.env)
		var d time.Duration
		err := lockSettings(nil, &d)
		if c.bad {
			if err == nil {
				t.Errorf("QUEEN_LOCK_TIMEOUT=%q: no error", c.env)
			}
			continue
		}
		if err != nil || d != c.want {
			t.Errorf("QUEEN_LOCK_TIMEOUT=%q: %v, %v; want %v", c.env, d, err, c.want)
		}
	}
}

// TestPartitionIdleSettings: QUEEN_PARTITION_IDLE is a Go duration, 0
// (passivation off) or 1s to 24h, over the default; a bad value stops the
// start with an error naming it.
func TestPartitionIdleSettings(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
		bad  bool
	}{
		{"", 2 * time.Minute, false},
		{"0", 0, false},
		{"30s", 30 * time.Second, false},
		{"2", 0, true},
		{"500ms", 0, true},
		{"25h", 0, true},
	} {
		t.Setenv("QUEEN_PARTITION_IDLE", c.env)
		d := 2 * time.Minute
		err := partitionIdleSettings(nil, &d)
		if c.bad {
			if err == nil {
				t.Errorf("QUEEN_PARTITION_IDLE=%q: no error", c.env)
			}
			continue
		}
		if err != nil || d != c.want {
			t.Errorf("QUEEN_PARTITION_IDLE=%q: %v, %v; want %v", c.env, d, err, c.want)
		}
	}
}

// TestPartitionMemorySettings: QUEEN_PARTITION_MEMORY_MB is a whole number
// of MiB, 0 (no bound) or 1 to 65536, over the default; a bad value stops
// the start with an error naming it. 64 MiB allows about 47,900 active
// partitions.
func TestPartitionMemorySettings(t *testing.T) {
	for _, c := range []struct {
		env  string
		want int
		bad  bool
	}{
		{"", 256, false},
		{"0", 0, false},
		{"128", 128, false},
		{"64MB", 0, true},
		{"-1", 0, true},
		{"65537", 0, true},
	} {
		t.Setenv("QUEEN_PARTITION_MEMORY_MB", c.env)
		mb := broker.DefaultPartitionMemoryMB
		err := partitionMemorySettings(nil, &mb)
		if c.bad {
			if err == nil {
				t.Errorf("QUEEN_PARTITION_MEMORY_MB=%q: no error", c.env)
			}
			continue
		}
		if err != nil || mb != c.want {
			t.Errorf("QUEEN_PARTITION_MEMORY_MB=%q: %v, %v; want %v", c.env, mb, err, c.want)
		}
	}
	if n := broker.MaxActivePartitions(64); n < 47000 || n > 48000 {
		t.Errorf("64 MiB allows %d active partitions; want about 47,900", n)
	}
	if n := broker.MaxActivePartitions(broker.DefaultPartitionMemoryMB); n < 150000 {
		t.Errorf("the default allows %d active partitions; want room for 100,000 spread ones and more", n)
	}
	// The cache's budget caps the bound at half of what it holds at a
	// partition's least: the defaults leave it to the partition budget,
	// a 64-MiB cache does not (191,739 actors would fill it and every
	// spawn would evict), no bound stays no bound, a cache off caps nothing.
	for _, c := range []struct {
		mb    int
		cache int64
		want  int
	}{
		{broker.DefaultPartitionMemoryMB, 512 << 20, broker.MaxActivePartitions(broker.DefaultPartitionMemoryMB)},
		{broker.DefaultPartitionMemoryMB, 64 << 20, 69_905},
		{broker.DefaultPartitionMemoryMB, 0, broker.MaxActivePartitions(broker.DefaultPartitionMemoryMB)},
		{0, 64 << 20, 0},
	} {
		if got := broker.ActivePartitionsBound(c.mb, c.cache); got != c.want {
			t.Errorf("ActivePartitionsBound(%d MiB, cache %d MiB) = %d; want %d", c.mb, c.cache>>20, got, c.want)
		}
	}
	if n := broker.MaxActivePartitions(0); n != 0 {
		t.Errorf("0 MiB allows %d active partitions; want 0 (no bound)", n)
	}
}

// TestServeMemoryLimitCountsThePartitions: the soft memory limit of serve
// is the dedup cache's budget plus the partition actors' budget plus the
// headroom, so a broker holding as many actors as its bound allows does not
// run its collector against a limit sized for the cache alone.
func TestServeMemoryLimitCountsThePartitions(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	serveMemoryLimit(512<<20, broker.DefaultPartitionMemoryMB)
	if got, want := debug.SetMemoryLimit(-1), int64(512<<20+broker.DefaultPartitionMemoryMB<<20+serveHeadroom); got != want {
		t.Errorf("limit %d MiB; want %d MiB", got>>20, want>>20)
	}
	serveMemoryLimit(512<<20, 0)
	if got, want := debug.SetMemoryLimit(-1), int64(512<<20+serveHeadroom); got != want {
		t.Errorf("no partition bound: limit %d MiB; want %d MiB", got>>20, want>>20)
	}
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetMemoryLimit(prev)
	serveMemoryLimit(512<<20, 256)
	if got := debug.SetMemoryLimit(-1); got != prev {
		t.Errorf("GOMEMLIMIT set: serve changed the limit to %d MiB", got>>20)
	}
}
