package client_test

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/internal/tlstest"
	"github.com/queen-mq/queen-go/transport/client"
)

// TestHTTPConfigTLSTrustsTheCA: HTTPConfig.TLS from TrustCA reaches an
// https:// gateway whose certificate that CA signed; without it the
// handshake fails and the call is a *NoAnswerError.
func TestHTTPConfigTLSTrustsTheCA(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`[{"index":0,"status":"queued","transactionId":"t","message_id":"00000000-0000-0000-0000-000000000000"}]`)) //nolint:errcheck
	}))
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	tc, err := client.TrustCA(caFile)
	require.NoError(t, err)
	ctx := context.Background()
	items := []client.PushItem{{Queue: "q", TransactionID: "t"}}

	rs, err := client.NewHTTP(client.HTTPConfig{URLs: []string{srv.URL}, TLS: tc}).Push(ctx, items)
	require.NoError(t, err)
	require.EqualValues(t, "queued", rs[0].Status)

	_, err = client.NewHTTP(client.HTTPConfig{URLs: []string{srv.URL}}).Push(ctx, items)
	var na *client.NoAnswerError
	require.ErrorAs(t, err, &na)
	require.ErrorContains(t, err, "certificate")
}

// TestTrustCARefusesWhatIsNoCA: a missing file, or one without a PEM
// certificate, is an error naming it.
func TestTrustCARefusesWhatIsNoCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := client.TrustCA(filepath.Join(dir, "missing.pem"))
	require.ErrorContains(t, err, "missing.pem")
	junk := filepath.Join(dir, "junk.pem")
	require.NoError(t, os.WriteFile(junk, []byte("not pem"), 0o600))
	_, err = client.TrustCA(junk)
	require.ErrorContains(t, err, "no PEM certificate")
	ca := tlstest.NewCA(t, dir, "ca")
	tc, err := client.TrustCA(ca.File)
	require.NoError(t, err)
	require.NotNil(t, tc.RootCAs)
}

// TestNATSAuthOptions: one kind of credentials at most; files are checked
// before any dial; the CA is left out of an in-process connection.
func TestNATSAuthOptions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	opts, err := client.NATSAuth{}.Options(false)
	require.NoError(t, err)
	require.Empty(t, opts)

	_, err = client.NATSAuth{User: "u", Creds: "x.creds"}.Options(false)
	require.ErrorContains(t, err, "not several")
	_, err = client.NATSAuth{Password: "p"}.Options(false)
	require.ErrorContains(t, err, "NATS_PASSWORD without NATS_USER")
	_, err = client.NATSAuth{Creds: filepath.Join(dir, "none.creds")}.Options(false)
	require.ErrorContains(t, err, "NATS_CREDS")
	_, err = client.NATSAuth{NkeySeed: filepath.Join(dir, "none.nk")}.Options(false)
	require.ErrorContains(t, err, "NATS_NKEY")
	_, err = client.NATSAuth{CAFile: filepath.Join(dir, "none.pem")}.Options(false)
	require.ErrorContains(t, err, "NATS_CA_FILE")

	opts, err = client.NATSAuth{User: "u", Password: "p", CAFile: ca.File}.Options(false)
	require.NoError(t, err)
	require.Len(t, opts, 2)
	opts, err = client.NATSAuth{User: "u", Password: "p", CAFile: ca.File}.Options(true)
	require.NoError(t, err)
	require.Len(t, opts, 1)
}
