package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/queen-mq/queen-go/cmd/queen/internal/broker"
	"github.com/queen-mq/queen-go/transport/client"
)

// securityFlags are serve's TLS and NATS credential settings (README, TLS
// and NATS credentials), each a flag whose default is its environment
// variable. NATS_PASSWORD has no flag: a secret on the command line shows
// in ps.
type securityFlags struct {
	tlsCert    string
	tlsKey     string
	tlsCA      string
	natsConfig string
	natsCreds  string
	natsNkey   string
	natsUser   string
	natsCAFile string
}

func (s *securityFlags) register(f *pflag.FlagSet) {
	f.StringVar(&s.tlsCert, "tls-cert", os.Getenv("QUEEN_TLS_CERT"), "PEM certificate (chain) of the HTTP gateway: with --tls-key it serves HTTPS; SIGHUP reads both files again without dropping connections (env QUEEN_TLS_CERT)")
	f.StringVar(&s.tlsKey, "tls-key", os.Getenv("QUEEN_TLS_KEY"), "PEM private key of --tls-cert (env QUEEN_TLS_KEY)")
	f.StringVar(&s.tlsCA, "tls-client-ca", os.Getenv("QUEEN_TLS_CLIENT_CA"), "PEM CA whose client certificates the HTTPS gateway requires of every connection (mutual TLS; needs --tls-cert); SIGHUP reads it again (env QUEEN_TLS_CLIENT_CA)")
	f.StringVar(&s.natsConfig, "nats-config", os.Getenv("QUEEN_NATS_CONFIG"), "nats-server configuration file of the embedded NATS server: its authorization (users, permissions, nkeys, accounts) and tls apply; the listen address stays --nats-listen (env QUEEN_NATS_CONFIG)")
	f.StringVar(&s.natsCreds, "nats-creds", os.Getenv("NATS_CREDS"), "the broker's NATS credentials file (user JWT and nkey seed) (env NATS_CREDS)")
	f.StringVar(&s.natsNkey, "nats-nkey", os.Getenv("NATS_NKEY"), "file holding the broker's NATS user nkey seed (env NATS_NKEY)")
	f.StringVar(&s.natsUser, "nats-user", os.Getenv("NATS_USER"), "the broker's NATS user; its password from env NATS_PASSWORD (env NATS_USER)")
	f.StringVar(&s.natsCAFile, "nats-ca-file", os.Getenv("NATS_CA_FILE"), "PEM CA the external NATS servers' certificates are checked against; the connection then requires TLS (env NATS_CA_FILE)")
}

// apply puts the settings into cfg.
func (s *securityFlags) apply(cfg *broker.Config) {
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = s.tlsCert, s.tlsKey, s.tlsCA
	cfg.NATSConfigFile = s.natsConfig
	cfg.NATSAuth = client.NATSAuth{Creds: s.natsCreds, NkeySeed: s.natsNkey, User: s.natsUser,
		Password: os.Getenv("NATS_PASSWORD"), CAFile: s.natsCAFile}
}

// reloadOnHangup makes SIGHUP read the broker's HTTPS certificate and key
// again (broker.ReloadTLS) when https, and the embedded NATS server's
// configuration file (broker.ReloadNATSConfig) when natsConfig, until ctx
// ends; what does not load is logged and the running one kept. With
// neither, SIGHUP keeps its default (it ends the process), as before.
func reloadOnHangup(ctx context.Context, b *broker.Broker, log *slog.Logger, https, natsConfig bool) {
	if !https && !natsConfig {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if https {
					if err := b.ReloadTLS(); err != nil {
						log.Error("SIGHUP: the HTTPS certificate was not reloaded; the current one stays", "err", err)
					}
				}
				if natsConfig {
					if err := b.ReloadNATSConfig(); err != nil {
						log.Error("SIGHUP: the NATS configuration was not reloaded; the running one stays", "err", err)
					}
				}
			}
		}
	}()
}
