package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/cmd/queen/internal/broker"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// runQueen runs `queen args...` as a process (the test binary running main)
// and returns its standard output, standard error and exit code.
func runQueen(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), stderr.String(), code
}

// TestVersion: `queen --version` names the release, the VCS revision
// ("unknown" in a test binary, which records none), the schema version and
// the layout generation (SPEC.md §2).
func TestVersion(t *testing.T) {
	out, _, code := runQueen(t, "--version")
	require.Equal(t, 0, code)
	require.Equal(t, "queen "+broker.Release+" (revision unknown, schema "+strconv.Itoa(persistence.SchemaVersion())+
		", layout "+strconv.Itoa(persistence.LayoutGeneration())+")\n", out)
}

// TestServeAndMigrateRefuseANewerSchema: on a database holding a migration
// this binary does not know, `queen serve` and `queen migrate` exit 1 at once
// with the message naming both versions, and apply nothing.
func TestServeAndMigrateRefuseANewerSchema(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	_, err := persistence.Migrate(ctx, url)
	require.NoError(t, err)
	dbExec(t, ctx, url, `INSERT INTO queen.schema_migrations (version, name) VALUES (9999, 'from_the_future')`)
	for _, args := range [][]string{
		{"serve", "--database-url", url, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", t.TempDir()},
		{"migrate", "--database-url", url},
	} {
		out, stderr, code := runQueen(t, args...)
		require.Equal(t, exitError, code, "%s: %s%s", args[0], out, stderr)
		for _, want := range []string{"queen: persistence: the database's schema is at version 9999",
			"schema version " + strconv.Itoa(persistence.SchemaVersion()), "run a newer release"} {
			require.Contains(t, stderr, want, args[0])
		}
		require.NotContains(t, stderr, "broker ready", args[0])
		t.Logf("queen %s: exit %d\n%s", args[0], code, stderr)
	}
	n := dbExec(t, ctx, url, `SELECT 1 FROM queen.brokers`)
	require.Zero(t, n, "no broker registered")
}
