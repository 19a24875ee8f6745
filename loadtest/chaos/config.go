package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Config is the chaos of one run: the faults injected while the producers
// run (report.ChaosReport) and, with Cluster, the watch of its shard
// ownership (report.ClusterReport). Its Faults are loadtest.Config's Chaos
// (the flags of queen loadtest set them); the rest comes from the run.
type Config struct {
	Faults
	// Duration is how long the load runs: no fault starts after it.
	Duration time.Duration
	// RequestTimeout is the clients' request timeout: a request a fault
	// left unanswered fails that long after it, and counts in the fault's
	// after-window.
	RequestTimeout time.Duration
	// Progress receives the status lines without Cluster (nil: none; a
	// Cluster writes its own).
	Progress io.Writer
}

// Faults is what a run's chaos injects, how often, and into what: the
// field Chaos of loadtest.Config, and the heart of Config.
type Faults struct {
	// Mode is the faults injected while the producers run: None ("" too);
	// Kill (SIGKILL a random broker, restart it after Pause), Stop (SIGSTOP
	// a random broker for Pause, then SIGCONT), PGFailover (SIGKILL the
	// PostgreSQL primary, promote its standby) and Mixed (one of each kind
	// per round, in an order drawn from Seed), which need Cluster;
	// NATSKill (SIGKILL a NATS node, restart it after Pause), which needs
	// Cluster with NATSNodes at least 2; PGRestart (a fast restart of the
	// managed PostgreSQL on the same port), which needs Cluster or
	// RestartPostgres.
	Mode string
	// Interval is the time between faults (DefaultInterval(Mode) when 0:
	// 20 s for Kill, 10 s for the others; with Cluster at least twice the
	// brokers' shard lease, else at least 1 s). The first fault comes half
	// an interval into the load, none after the load.
	Interval time.Duration
	// Pause is how long a killed broker stays down, a stopped one frozen
	// and a killed NATS node down (0: 1 s for a kill, 5 s for a stop and a
	// nats-kill; below Interval).
	Pause time.Duration
	// Seed draws the brokers hit and (Mixed) the order of the faults (0:
	// from the clock; the report gives the seed used).
	Seed uint64
	// Cluster is the broker processes the run drives (StartCluster; nil: a
	// broker of the caller's, which only PGRestart with RestartPostgres can
	// hit): the run watches its shard ownership, with or without faults.
	Cluster *Cluster
	// RestartPostgres restarts the broker's PostgreSQL in place and returns
	// once it accepts connections again (PGRestart without Cluster:
	// queen loadtest --embedded passes the embedded broker's).
	RestartPostgres func(ctx context.Context) error
}

// CheckMode refuses a mode that is not one of the chaos modes ("" and None
// are).
func CheckMode(mode string) error {
	if On(mode) && faultKinds(mode) == nil {
		return fmt.Errorf("chaos %q: want none, kill, stop, pg-restart, pg-failover, nats-kill or mixed", mode)
	}
	return nil
}

// Validate checks c (with Interval filled in) and returns an error naming
// the first bad setting: an unknown mode, a mode without what it needs
// (brokers of our own, a standby, a NATS cluster of 2 nodes or more, a
// PostgreSQL to restart), a negative Pause, an Interval too short for the
// shard lease, a Pause not below Interval.
func (c *Config) Validate() error {
	if !On(c.Mode) {
		return nil
	}
	if err := CheckMode(c.Mode); err != nil {
		return err
	}
	switch {
	case c.Mode == PGFailover && (c.Cluster == nil || !c.Cluster.cfg.PGStandby):
		return errors.New("chaos pg-failover needs brokers of our own with a standby: pass --brokers N --pg-standby")
	case c.Mode == NATSKill && (c.Cluster == nil || c.Cluster.cfg.NATSNodes < 2):
		return errors.New("chaos nats-kill kills a node of a NATS cluster and needs at least 2: pass --brokers N --nats-nodes M with M at least 2")
	case c.Cluster == nil && c.Mode != PGRestart:
		return fmt.Errorf("chaos %s needs brokers of our own: pass --brokers N", c.Mode)
	case c.Cluster == nil && c.RestartPostgres == nil:
		return errors.New("chaos pg-restart needs a managed PostgreSQL of our own: pass --brokers N or --embedded")
	case c.Pause < 0:
		return fmt.Errorf("chaos pause %s: want at least 0", c.Pause)
	}
	if c.Cluster != nil {
		lease := 10 * time.Second // the brokers' default
		if c.Cluster.cfg.Lease > 0 {
			lease = c.Cluster.cfg.Lease
		}
		if c.Interval < 2*lease {
			return fmt.Errorf("chaos interval %s: want at least twice the shard lease (%s)", c.Interval, 2*lease)
		}
	} else if c.Interval < time.Second {
		return fmt.Errorf("chaos interval %s: want at least 1s", c.Interval)
	}
	for _, k := range faultKinds(c.Mode) {
		if p := c.pauseFor(k); p >= c.Interval {
			return fmt.Errorf("chaos pause %s (%s): want less than the chaos interval %s", p, k, c.Interval)
		}
	}
	return nil
}

// sleep waits d or until ctx ends; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	wait, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	<-wait.Done()
	return ctx.Err() == nil
}
