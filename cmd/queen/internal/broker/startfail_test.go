package broker

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestStartFailureStopsTheManagedPostgreSQL: a broker that fails after its
// managed PostgreSQL started (its NATS server cannot be reached) returns an
// error (no panic) and leaves no postmaster behind; a taken HTTP port fails
// before any database work.
func TestStartFailureStopsTheManagedPostgreSQL(t *testing.T) {
	base, err := os.MkdirTemp("", "queen-startfail-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil { // reachable by the postgres user when root
		t.Fatal(err)
	}
	dataDir := filepath.Join(base, "data")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	b, err := Start(context.Background(), Config{DataDir: dataDir, HTTPAddr: taken.Addr().String(), NATSListen: "127.0.0.1:0", Logger: quietLogger()})
	if err == nil {
		b.Stop(context.Background()) //nolint:errcheck
		t.Fatal("Start succeeded on a taken HTTP port")
	}
	if _, statErr := os.Stat(filepath.Join(dataDir, "postgres")); statErr == nil {
		t.Fatalf("a taken HTTP port (%v) still started the managed PostgreSQL", err)
	}

	b, err = Start(context.Background(), Config{DataDir: dataDir, HTTPAddr: "127.0.0.1:0", NATSURL: "nats://" + taken.Addr().String(), Logger: quietLogger()})
	if err == nil {
		b.Stop(context.Background()) //nolint:errcheck
		t.Fatal("Start succeeded with an unreachable NATS server")
	}
	pidFile := filepath.Join(dataDir, "postgres", "data", "postmaster.pid")
	if _, statErr := os.Stat(filepath.Dir(pidFile)); statErr != nil {
		t.Fatalf("the managed cluster was not created where expected (%v); start error: %v", statErr, err)
	}
	if _, statErr := os.Stat(pidFile); statErr == nil {
		t.Fatalf("postmaster.pid still present after a failed Start (%v): the managed PostgreSQL was left running", err)
	}

	// The same data dir starts cleanly afterwards.
	b, err = Start(context.Background(), Config{DataDir: dataDir, HTTPAddr: "127.0.0.1:0", NATSListen: "127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
