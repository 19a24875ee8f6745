package main

import (
	"crypto/tls"
	"os"

	"github.com/spf13/pflag"

	"github.com/queen-mq/queen-go/transport/client"
)

// clientTLS is the HTTPS trust of the client verbs, the operator verbs and
// the load harness: --ca-file (a CA besides the system's roots) and
// --client-cert with --client-key (a client certificate for a gateway that
// requires one, QUEEN_TLS_CLIENT_CA). Unset: the system's roots, no client
// certificate.
type clientTLS struct {
	caFile, certFile, keyFile string
}

// registerCert adds --client-cert and --client-key to f.
func (c *clientTLS) registerCert(f *pflag.FlagSet) {
	f.StringVar(&c.certFile, "client-cert", os.Getenv("QUEEN_CLIENT_CERT"), "PEM client certificate to present to an https:// gateway that requires one (mutual TLS; with --client-key) (env QUEEN_CLIENT_CERT)")
	f.StringVar(&c.keyFile, "client-key", os.Getenv("QUEEN_CLIENT_KEY"), "PEM private key of --client-cert (env QUEEN_CLIENT_KEY)")
}

// config is the TLS configuration for an https:// gateway: nil when no
// flag is set (the system's roots), else the CA's pool and the client
// certificate. A file that does not load is an error naming it.
func (c clientTLS) config() (*tls.Config, error) {
	var tc *tls.Config
	if c.caFile != "" {
		var err error
		if tc, err = client.TrustCA(c.caFile); err != nil {
			return nil, err
		}
	}
	return client.WithClientCertificate(tc, c.certFile, c.keyFile)
}
