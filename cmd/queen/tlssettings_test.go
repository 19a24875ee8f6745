package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/cmd/queen/internal/broker"
	"github.com/queen-mq/queen-go/internal/tlstest"
	"github.com/queen-mq/queen-go/loadtest"
	"github.com/queen-mq/queen-go/persistence/pgtest"
	"github.com/queen-mq/queen-go/transport/client"
)

// TestSecuritySettings: QUEEN_TLS_CERT, QUEEN_TLS_KEY, QUEEN_NATS_CONFIG and
// the NATS_* credentials reach the broker's Config from the environment
// (NATS_PASSWORD only from there); a flag given wins over its variable.
func TestSecuritySettings(t *testing.T) {
	for k, v := range map[string]string{
		"QUEEN_TLS_CERT": "/c.pem", "QUEEN_TLS_KEY": "/k.pem", "QUEEN_NATS_CONFIG": "/nats.conf",
		"NATS_CREDS": "", "NATS_NKEY": "", "NATS_USER": "queen", "NATS_PASSWORD": "pw", "NATS_CA_FILE": "/ca.pem",
	} {
		t.Setenv(k, v)
	}
	cmd := serveCmd()
	require.NoError(t, cmd.Flags().Parse([]string{"--tls-key", "/flag-k.pem"}))
	require.Nil(t, cmd.Flags().Lookup("nats-password"), "a password flag would show in ps")
	var sec securityFlags
	sec.register(pflag.NewFlagSet("security", pflag.ContinueOnError)) // a second set, read from the same environment
	var cfg broker.Config
	sec.apply(&cfg)
	require.Equal(t, "/c.pem", cfg.TLSCertFile)
	require.Equal(t, "/nats.conf", cfg.NATSConfigFile)
	require.Equal(t, client.NATSAuth{User: "queen", Password: "pw", CAFile: "/ca.pem"}, cfg.NATSAuth)
	require.Equal(t, "/flag-k.pem", cmd.Flags().Lookup("tls-key").Value.String())
}

// TestDatabaseURLKeepsSSLMode: DATABASE_URL reaches the broker verbatim,
// sslmode=verify-full and sslrootcert included (pgx honours them; the
// broker test TestDatabaseURLVerifyFullIsHonoured shows it refuses a
// server without TLS).
func TestDatabaseURLKeepsSSLMode(t *testing.T) {
	const u = "postgres://queen@db.example:5432/queen?sslmode=verify-full&sslrootcert=/etc/queen/pg-ca.pem"
	t.Setenv("DATABASE_URL", u)
	require.Equal(t, u, databaseURLFromEnv())
	cmd := serveCmd()
	require.Equal(t, u, cmd.Flags().Lookup("database-url").DefValue)
}

// TestLoadtestOverHTTPS: queen loadtest against an HTTPS broker whose
// certificate a test CA signed: without trust in it the run fails; with
// Config.TLS (--ca-file) it pushes, consumes and passes its audit. A
// --ca-file that is no CA stops the command before any request.
func TestLoadtestOverHTTPS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.Issue(t, 1, certFile, keyFile)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{
		DatabaseURL: pgtest.NewDatabase(t), HTTPAddr: "127.0.0.1:0", NATSListen: "127.0.0.1:0",
		DataDir: t.TempDir(), TLSCertFile: certFile, TLSKeyFile: keyFile,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, b.Stop(ctx))
	})
	require.True(t, strings.HasPrefix(b.HTTPURL(), "https://"), b.HTTPURL())

	cfg := smallRun(b, b.HTTPURL())
	cfg.Queue, cfg.Consumers = "lt-https", 1
	_, err = loadtest.Run(context.Background(), cfg)
	require.ErrorContains(t, err, "certificate")

	cfg.Queue = "lt-https-2"
	cfg.TLS, err = client.TrustCA(ca.File)
	require.NoError(t, err)
	rep, err := loadtest.Run(context.Background(), cfg)
	require.NoError(t, err)
	require.True(t, rep.Audit.Passed, "%v", rep.Audit.Examples)
	require.Positive(t, rep.Verdicts.Queued)

	// SIGHUP (reloadOnHangup, as queen serve sets it up) reloads the
	// renewed certificate for new connections.
	ca.Issue(t, 2, certFile, keyFile)
	hup, stop := context.WithCancel(context.Background())
	defer stop()
	reloadOnHangup(hup, b, slog.New(slog.NewTextHandler(io.Discard, nil)), true, false)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	require.Eventually(t, func() bool {
		tr := &http.Transport{TLSClientConfig: cfg.TLS.Clone()}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(b.HTTPURL() + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64() == 2
	}, 30*time.Second, 20*time.Millisecond, "a new connection after SIGHUP sees the renewed certificate")

	cmd := loadtestCmd()
	cmd.SetArgs([]string{"--ca-file", filepath.Join(dir, "missing.pem"), "--target", b.HTTPURL()})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	require.ErrorContains(t, cmd.ExecuteContext(context.Background()), "--ca-file")
}

// TestLoadtestWithNATSCredentials: against a broker whose embedded NATS
// server has users (QUEEN_NATS_CONFIG), a loadtest over NATS without
// credentials is refused by the server; with a user allowed queen.v1.>
// (Config.NATSOptions, queen loadtest --nats-user) it pushes, consumes and
// passes its audit.
func TestLoadtestWithNATSCredentials(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(`authorization { users = [
  { user: queen, password: broker-secret }
  { user: loader, password: loader-secret,
    permissions: { publish: { allow: ["queen.v1.>"] }, subscribe: { allow: ["_INBOX.>"] } } }
] }`), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{
		DatabaseURL: pgtest.NewDatabase(t), HTTPAddr: "127.0.0.1:0", NATSListen: "127.0.0.1:0",
		DataDir: t.TempDir(), NATSConfigFile: conf, NATSAuth: client.NATSAuth{User: "queen", Password: "broker-secret"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, b.Stop(ctx))
	})

	cfg := smallRun(b, b.NATSURL())
	cfg.Queue, cfg.Consumers = "lt-nats-auth", 1
	_, err = loadtest.Run(context.Background(), cfg)
	require.ErrorContains(t, err, "Authorization Violation")

	cfg.Queue = "lt-nats-auth-2"
	cfg.NATSOptions, err = client.NATSAuth{User: "loader", Password: "loader-secret"}.Options(false)
	require.NoError(t, err)
	rep, err := loadtest.Run(context.Background(), cfg)
	require.NoError(t, err)
	require.True(t, rep.Audit.Passed, "%v", rep.Audit.Examples)
	require.Positive(t, rep.Verdicts.Queued)
}

// TestClientTLS: --ca-file, --client-cert and --client-key build the
// HTTPS trust of the client verbs, the operator verbs and the harness: nil
// with none set, a client certificate only with its key, a file that does
// not load named in the error.
func TestClientTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	ca.Issue(t, 1, cert, key)
	tc, err := clientTLS{}.config()
	if err != nil || tc != nil {
		t.Fatalf("no flag: %v, %v; want nil, nil", tc, err)
	}
	tc, err = clientTLS{caFile: ca.File, certFile: cert, keyFile: key}.config()
	if err != nil || tc.RootCAs == nil || len(tc.Certificates) != 1 {
		t.Fatalf("CA and client certificate: %+v, %v", tc, err)
	}
	if _, err = (clientTLS{certFile: cert}).config(); err == nil || !strings.Contains(err.Error(), "both") {
		t.Fatalf("a certificate without its key: %v", err)
	}
	if _, err = (clientTLS{certFile: cert, keyFile: filepath.Join(dir, "missing.pem")}).config(); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("a key that does not load: %v", err)
	}
}
