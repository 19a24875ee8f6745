package broker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// certificate is the HTTPS certificate of the gateway (Config.TLSCertFile,
// Config.TLSKeyFile), read again by reload: the TLS configuration's
// GetCertificate hands each new handshake the current one, so a swap takes
// effect for new connections while open ones keep the session they have.
//
// With a client CA (Config.TLSClientCAFile) every connection must present a
// client certificate that this CA signed (mutual TLS); the CA file is read
// again with the pair.
type certificate struct {
	certFile, keyFile string
	clientCAFile      string
	cur               atomic.Pointer[tls.Certificate]
	clientCAs         atomic.Pointer[x509.CertPool]
}

// newCertificate loads the pair (and the client CA, when clientCAFile is
// set) once; a missing file, a key that does not match or a CA file with
// no PEM certificate is an error naming the file.
func newCertificate(certFile, keyFile, clientCAFile string) (*certificate, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("broker: HTTPS needs both a certificate and a key (QUEEN_TLS_CERT and QUEEN_TLS_KEY)")
	}
	c := &certificate{certFile: certFile, keyFile: keyFile, clientCAFile: clientCAFile}
	if _, err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// reload reads the pair (and the client CA) again and, when they load,
// makes them the ones new handshakes get; on an error the current ones
// stay. It returns the new leaf certificate.
func (c *certificate) reload() (*x509.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("broker: TLS certificate %s, key %s: %w", c.certFile, c.keyFile, err)
	}
	var cas *x509.CertPool
	if c.clientCAFile != "" {
		pem, err := os.ReadFile(c.clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("broker: TLS client CA: %w", err)
		}
		cas = x509.NewCertPool()
		if !cas.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("broker: TLS client CA %s: no PEM certificate in it", c.clientCAFile)
		}
	}
	if pair.Leaf == nil { // GODEBUG=x509keypairleaf=0
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("broker: TLS certificate %s: %w", c.certFile, err)
		}
	}
	c.cur.Store(&pair)
	if cas != nil {
		c.clientCAs.Store(cas)
	}
	return pair.Leaf, nil
}

// config is the HTTP server's TLS configuration: TLS 1.2 at least, the
// current certificate per handshake and, with a client CA, a client
// certificate it signed required of every connection (the current CA per
// handshake).
func (c *certificate) config() *tls.Config {
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.cur.Load(), nil }
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: get}
	if c.clientCAFile != "" {
		cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: get,
				ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: c.clientCAs.Load()}, nil
		}
	}
	return cfg
}

// ReloadTLS reads the HTTPS certificate and key files again (`queen serve`
// does on SIGHUP): new connections get the new certificate, connections
// already open keep theirs and go on working. A pair that does not load is
// an error and the current certificate stays. Without HTTPS: an error.
func (b *Broker) ReloadTLS() error {
	if b.cert == nil {
		return errors.New("broker: no HTTPS certificate to reload (QUEEN_TLS_CERT is not set)")
	}
	leaf, err := b.cert.reload()
	if err != nil {
		return err
	}
	b.log.Info("HTTPS certificate reloaded", "cert", b.cert.certFile, "subject", leaf.Subject.String(),
		"not_after", leaf.NotAfter.Format(time.RFC3339))
	return nil
}

// ReloadNATSConfig reads the embedded NATS server's configuration file
// (Config.NATSConfigFile) again and applies it with nats-server's own
// reload (`queen serve` does on SIGHUP): added users may connect at once,
// a removed user's or a narrowed permission's connections are refused or
// closed by the server; the broker's own connections stay. A file that does
// not load or a change nats-server cannot make live (the listen address)
// is an error and the running configuration stays. Without an embedded
// server configured by a file: an error.
func (b *Broker) ReloadNATSConfig() error {
	if b.natsEmbedded == nil {
		return errors.New("broker: no embedded NATS server (NATS_URL is set)")
	}
	if err := b.natsEmbedded.reload(); err != nil {
		return err
	}
	b.log.Info("embedded NATS configuration reloaded", "file", b.natsEmbedded.configFile)
	return nil
}
