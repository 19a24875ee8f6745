package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/queen-mq/queen-go/internal/tlstest"
	"github.com/queen-mq/queen-go/persistence/pgtest"
	"github.com/queen-mq/queen-go/transport/client"
	"github.com/queen-mq/queen-go/transport/wire"
)

// startSecured starts a broker on a fresh database with cfg's security
// settings (mod), without the test env's unauthenticated NATS client.
func startSecured(t *testing.T, mod func(*Config)) *Broker {
	t.Helper()
	return startBrokerOn(t, pgtest.NewDatabase(t), mod)
}

// TestHTTPSReloadsItsCertificate: with QUEEN_TLS_CERT/QUEEN_TLS_KEY the
// gateway serves HTTPS; a client trusting the test CA pushes, one that
// does not is refused by the handshake. After the files are renewed and
// ReloadTLS (what SIGHUP calls) runs, a new connection sees the new
// certificate while a keep-alive connection opened before keeps working on
// its own; a pair that does not load is refused and the current one stays.
func TestHTTPSReloadsItsCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.Issue(t, 101, certFile, keyFile)
	b := startSecured(t, func(c *Config) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile })
	base := b.HTTPURL()
	if !strings.HasPrefix(base, "https://127.0.0.1:") {
		t.Fatalf("HTTPURL %q: want https://127.0.0.1:...", base)
	}
	tc, err := client.TrustCA(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	newClient := func() *http.Client {
		tr := &http.Transport{TLSClientConfig: tc.Clone(), MaxIdleConnsPerHost: 1}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	// health answers the serial of the certificate the connection saw and
	// whether it was a kept-alive one.
	health := func(hc *http.Client) (serial int64, reused bool) {
		t.Helper()
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET /health over HTTPS: %v", err)
		}
		defer resp.Body.Close()
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.TLS == nil {
			t.Fatalf("GET /health: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64(), reused
	}

	old := newClient()
	if s, reused := health(old); s != 101 || reused {
		t.Fatalf("first connection: serial %d reused %v, want 101 on a new connection", s, reused)
	}
	// No trust in the test CA: the handshake fails.
	untrusting := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	if resp, err := untrusting.Get(base + "/health"); err == nil {
		resp.Body.Close()
		t.Fatal("a client without the CA reached the HTTPS gateway")
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusting client: %v, want a certificate error", err)
	}
	// The Go client with HTTPConfig.TLS pushes.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := client.NewHTTP(client.HTTPConfig{URLs: []string{base}, TLS: tc})
	rs, err := cl.Push(ctx, []client.PushItem{{Queue: "tls-q", Partition: "p", TransactionID: "t-1", Payload: []byte(`{"n":1}`)}})
	if err != nil || len(rs) != 1 || rs[0].Status != "queued" {
		t.Fatalf("push over HTTPS: %+v %v", rs, err)
	}

	ca.Issue(t, 102, certFile, keyFile) // renewed on disk
	if s, _ := health(newClient()); s != 101 {
		t.Fatalf("before the reload a new connection saw serial %d, want 101", s)
	}
	if err := b.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if s, _ := health(newClient()); s != 102 {
		t.Fatalf("after the reload a new connection saw serial %d, want 102", s)
	}
	if s, reused := health(old); s != 101 || !reused {
		t.Fatalf("the keep-alive connection after the reload: serial %d reused %v, want 101 on the same connection", s, reused)
	}

	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.ReloadTLS(); err == nil {
		t.Fatal("ReloadTLS accepted a key file that is not a key")
	}
	if s, _ := health(newClient()); s != 102 {
		t.Fatalf("after a failed reload a new connection saw serial %d, want 102 (kept)", s)
	}
}

// TestHTTPSNeedsCertAndKey: a certificate without its key stops the start.
func TestHTTPSNeedsCertAndKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	ca.Issue(t, 1, filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"))
	_, err := Start(context.Background(), Config{TLSCertFile: filepath.Join(dir, "c.pem"), HTTPAddr: "127.0.0.1:0",
		NATSListen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "QUEEN_TLS_KEY") {
		t.Fatalf("Start with a certificate and no key: %v, want an error naming QUEEN_TLS_KEY", err)
	}
}

// natsAuthConfig is a nats-server configuration file: the broker's user
// (any subject), a producer that may publish only to queen.v1.push and
// receive its replies.
const natsAuthConfig = `
authorization {
  users = [
    { user: queen, password: broker-secret }
    { user: producer, password: producer-secret,
      permissions: { publish: { allow: ["queen.v1.push"] }, subscribe: { allow: ["_INBOX.>"] } } }
  ]
}
`

// TestEmbeddedNATSUsersAndPermissions: the embedded server given users and
// TLS by QUEEN_NATS_CONFIG (nats-server's own authorization and tls
// blocks) refuses a client that does not trust its certificate, one
// without credentials and one with a wrong password, lets the producer
// push and refuses its publish to a subject outside its permissions; the
// broker, connected in process with its own user (no TLS), keeps serving
// the producer.
func TestEmbeddedNATSUsersAndPermissions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "nats-ca")
	certFile, keyFile := filepath.Join(dir, "nats-cert.pem"), filepath.Join(dir, "nats-key.pem")
	ca.Issue(t, 9, certFile, keyFile)
	conf := filepath.Join(dir, "nats.conf")
	tlsBlock := "tls { cert_file: \"" + certFile + "\", key_file: \"" + keyFile + "\" }\n"
	if err := os.WriteFile(conf, []byte(tlsBlock+natsAuthConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startSecured(t, func(c *Config) {
		c.NATSConfigFile = conf
		c.NATSAuth = client.NATSAuth{User: "queen", Password: "broker-secret"}
	})
	tc, err := client.TrustCA(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nats.Connect(b.NATSURL(), nats.UserInfo("producer", "producer-secret")); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("connect without trusting the server's CA: %v, want a certificate error", err)
	}
	if _, err := nats.Connect(b.NATSURL(), nats.Secure(tc), nats.Name("no-credentials")); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect without credentials: %v, want %v", err, nats.ErrAuthorization)
	}
	if _, err := nats.Connect(b.NATSURL(), nats.Secure(tc), nats.UserInfo("producer", "wrong")); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect with a wrong password: %v, want %v", err, nats.ErrAuthorization)
	}
	asyncErrs := make(chan error, 16)
	nc, err := nats.Connect(b.NATSURL(), nats.Secure(tc), nats.UserInfo("producer", "producer-secret"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case asyncErrs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("producer connect: %v", err)
	}
	t.Cleanup(nc.Close)
	push := func(txn string) {
		t.Helper()
		msg, err := nc.Request(wire.SubjectPush, []byte(`{"items":[{"queue":"nats-auth","partition":"p","transactionId":"`+txn+`","payload":{}}]}`), 10*time.Second)
		if err != nil {
			t.Fatalf("producer push %s: %v", txn, err)
		}
		if code := msg.Header.Get(wire.HeaderErrorCode); code != "" || !strings.Contains(string(msg.Data), `"queued"`) {
			t.Fatalf("producer push %s: error code %q, body %s", txn, code, msg.Data)
		}
	}
	push("t-1")

	if err := nc.Publish(wire.SubjectPop, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-asyncErrs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), wire.SubjectPop) {
			t.Fatalf("publish outside the permissions: %v, want a permissions violation naming %s", err, wire.SubjectPop)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not refuse the producer's publish to " + wire.SubjectPop)
	}
	push("t-2") // the broker and the producer's connection go on

	// A user added to the file may connect once the configuration is
	// reloaded (SIGHUP); the producer's connection and the broker go on.
	late := nats.UserInfo("late", "late-secret")
	if _, err := nats.Connect(b.NATSURL(), nats.Secure(tc), late); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect as a user not yet configured: %v, want %v", err, nats.ErrAuthorization)
	}
	withLate := strings.Replace(natsAuthConfig, "users = [", "users = [\n    { user: late, password: late-secret }", 1)
	if err := os.WriteFile(conf, []byte(tlsBlock+withLate), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.ReloadNATSConfig(); err != nil {
		t.Fatal(err)
	}
	lc, err := nats.Connect(b.NATSURL(), nats.Secure(tc), late)
	if err != nil {
		t.Fatalf("connect as the user added by the reload: %v", err)
	}
	lc.Close()
	push("t-3")

	if err := os.WriteFile(conf, []byte("authorization { users = [ "), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.ReloadNATSConfig(); err == nil || !strings.Contains(err.Error(), "QUEEN_NATS_CONFIG") {
		t.Fatalf("reload of a broken file: %v, want an error naming QUEEN_NATS_CONFIG", err)
	}
	push("t-4")
}

// TestExternalNATSWithUserAndTLS: the broker reaches an external NATS
// server that requires TLS and a user, with NATS_USER/NATS_PASSWORD and
// NATS_CA_FILE (Config.NATSAuth), and serves over it; without the CA the
// start fails.
func TestExternalNATSWithUserAndTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "nats-ca")
	certFile, keyFile := filepath.Join(dir, "nats-cert.pem"), filepath.Join(dir, "nats-key.pem")
	ca.Issue(t, 7, certFile, keyFile)
	stc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		TLSConfig: stc, TLS: true, TLSTimeout: 5,
		Users: []*server.User{{Username: "queen", Password: "broker-secret"}}})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("the external NATS server did not start")
	}
	natsURL := "nats://" + ns.Addr().String()

	_, err = Start(context.Background(), Config{DatabaseURL: pgtest.NewDatabase(t), HTTPAddr: "127.0.0.1:0",
		NATSURL: natsURL, DataDir: t.TempDir(), Logger: quietLogger(),
		NATSAuth: client.NATSAuth{User: "queen", Password: "broker-secret"}})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Start without the NATS CA: %v, want a certificate error", err)
	}

	b := startSecured(t, func(c *Config) {
		c.NATSURL = natsURL
		c.NATSAuth = client.NATSAuth{User: "queen", Password: "broker-secret", CAFile: ca.File}
	})
	opts, err := client.NATSAuth{User: "queen", Password: "broker-secret", CAFile: ca.File}.Options(false)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := client.ConnectNATS(natsURL, "test-client", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := client.NewNATS(nc).Push(ctx, []client.PushItem{{Queue: "ext-tls", Partition: "p", TransactionID: "t-1", Payload: []byte(`{}`)}})
	if err != nil || len(rs) != 1 || rs[0].Status != "queued" {
		t.Fatalf("push through the external TLS NATS: %+v %v", rs, err)
	}
	if !strings.HasPrefix(b.NATSURL(), "nats://127.0.0.1:") {
		t.Fatalf("NATSURL %q: want the external server's", b.NATSURL())
	}
}

// TestDatabaseURLVerifyFullIsHonoured: sslmode=verify-full (and require)
// on DATABASE_URL reaches pgx unchanged: against the test PostgreSQL, which
// serves no TLS, the start fails on the refused TLS instead of falling
// back to a clear-text connection.
func TestDatabaseURLVerifyFullIsHonoured(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "pg-ca")
	for _, mode := range []string{"verify-full", "require"} {
		u, err := url.Parse(pgtest.NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("sslmode", mode)
		q.Set("sslrootcert", ca.File)
		u.RawQuery = q.Encode()
		b, err := Start(context.Background(), Config{DatabaseURL: u.String(), HTTPAddr: "127.0.0.1:0",
			NATSListen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: quietLogger()})
		if err == nil {
			b.Stop(context.Background()) //nolint:errcheck
			t.Fatalf("sslmode=%s: the broker started on a PostgreSQL without TLS", mode)
		}
		if !strings.Contains(err.Error(), "TLS") {
			t.Fatalf("sslmode=%s: %v, want the refused TLS named", mode, err)
		}
	}
}

// TestHTTPSRequiresClientCertificates (QUEEN_TLS_CLIENT_CA): the gateway
// takes a connection only with a client certificate the client CA signed;
// none, or one of another CA, fails the handshake. A client CA without a
// certificate stops the start.
func TestHTTPSRequiresClientCertificates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	serverCA, clientCA := tlstest.NewCA(t, dir, "server-ca"), tlstest.NewCA(t, dir, "client-ca")
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	serverCA.Issue(t, 1, certFile, keyFile)
	goodCert, goodKey := filepath.Join(dir, "good.pem"), filepath.Join(dir, "good-key.pem")
	clientCA.Issue(t, 2, goodCert, goodKey)
	strayCert, strayKey := filepath.Join(dir, "stray.pem"), filepath.Join(dir, "stray-key.pem")
	serverCA.Issue(t, 3, strayCert, strayKey)

	b := startSecured(t, func(c *Config) {
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = certFile, keyFile, clientCA.File
	})
	trust, err := client.TrustCA(serverCA.File)
	if err != nil {
		t.Fatal(err)
	}
	get := func(tc *tls.Config) error {
		t.Helper()
		tr := &http.Transport{TLSClientConfig: tc}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(b.HTTPURL() + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /health: %d", resp.StatusCode)
		}
		return nil
	}
	if err := get(trust); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	stray, err := client.WithClientCertificate(trust, strayCert, strayKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(stray); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
	good, err := client.WithClientCertificate(trust, goodCert, goodKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(good); err != nil {
		t.Fatalf("a client certificate of the client CA: %v", err)
	}

	_, err = Start(context.Background(), Config{TLSClientCAFile: clientCA.File, HTTPAddr: "127.0.0.1:0",
		NATSListen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "QUEEN_TLS_CERT") {
		t.Fatalf("Start with a client CA and no certificate: %v, want an error naming QUEEN_TLS_CERT", err)
	}
}
