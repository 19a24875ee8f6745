package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
)

// TrustCA returns a TLS client configuration that trusts the PEM
// certificates in caFile (a private CA's, or a self-signed broker's)
// besides the system's roots, for https:// gateways (HTTPConfig.TLS) and
// tls:// NATS servers (nats.Secure). The server's name is checked against
// its certificate as usual; TLS 1.2 at least. A file that cannot be read
// or holds no PEM certificate is an error naming it.
func TrustCA(caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// NATSAuth is how a NATS connection proves who it is and whom it trusts:
// the broker's connections (to an external NATS, or to the embedded server
// given users by QUEEN_NATS_CONFIG) and a client's. At most one of Creds,
// NkeySeed and User may be set; all empty: no credentials (a server
// without authorization). nats.go and nats-server do the work: a server
// that refuses them answers "Authorization Violation" at connect.
type NATSAuth struct {
	// Creds is a NATS .creds file, a user JWT and its nkey seed (NATS_CREDS;
	// an operator-mode server's user, nats.UserCredentials).
	Creds string
	// NkeySeed is a file holding a user's nkey seed, "SU..." (NATS_NKEY;
	// nats.NkeyOptionFromSeed): the server knows the public key.
	NkeySeed string
	// User and Password are a plain user's (NATS_USER, NATS_PASSWORD).
	User, Password string
	// CAFile, when set, is a PEM file of the CA the NATS servers'
	// certificates are checked against (NATS_CA_FILE); the connection then
	// requires TLS (a nats:// URL too). Not used on an in-process
	// connection to the embedded server, which is not a socket.
	CAFile string
}

// Options are the nats.go options carrying a's credentials and, unless
// inProcess, its CA; none when a is empty. Two kinds of credentials at once,
// a password without a user, or an unreadable seed file is an error.
func (a NATSAuth) Options(inProcess bool) ([]nats.Option, error) {
	var opts []nats.Option
	kinds := 0
	for _, s := range []string{a.Creds, a.NkeySeed, a.User} {
		if s != "" {
			kinds++
		}
	}
	if kinds > 1 {
		return nil, errors.New("NATS credentials: give one of NATS_CREDS, NATS_NKEY and NATS_USER, not several")
	}
	switch {
	case a.Creds != "":
		if _, err := os.Stat(a.Creds); err != nil {
			return nil, fmt.Errorf("NATS_CREDS: %w", err)
		}
		opts = append(opts, nats.UserCredentials(a.Creds))
	case a.NkeySeed != "":
		o, err := nats.NkeyOptionFromSeed(a.NkeySeed)
		if err != nil {
			return nil, fmt.Errorf("NATS_NKEY %s: %w", a.NkeySeed, err)
		}
		opts = append(opts, o)
	case a.User != "":
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	case a.Password != "":
		return nil, errors.New("NATS_PASSWORD without NATS_USER")
	}
	if a.CAFile != "" && !inProcess {
		tc, err := TrustCA(a.CAFile)
		if err != nil {
			return nil, fmt.Errorf("NATS_CA_FILE: %w", err)
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

// WithClientCertificate returns tc (a TrustCA result, or nil for the
// system's roots) presenting the PEM client certificate certFile with its
// key keyFile to servers that ask for one (mutual TLS: a gateway started
// with QUEEN_TLS_CLIENT_CA, a NATS server whose tls block verifies
// clients). Both files or neither; a pair that does not load is an error
// naming the files.
func WithClientCertificate(tc *tls.Config, certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" {
		return tc, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("a client certificate needs both its certificate and its key file")
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("client certificate %s, key %s: %w", certFile, keyFile, err)
	}
	if tc == nil {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
	} else {
		tc = tc.Clone()
	}
	tc.Certificates = append(tc.Certificates, pair)
	return tc, nil
}
