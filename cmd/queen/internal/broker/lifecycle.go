package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/lifecycle"
	"github.com/queen-mq/queen-go/persistence/localpg"
	"github.com/queen-mq/queen-go/transport"
)

// running is one started piece of the broker, stopped by Broker.teardown in
// the reverse order of the starts.
type running struct {
	name string
	stop func(ctx context.Context) error
	// warn, when set, makes a failed stop a warning logged with this
	// message instead of an error of Stop (the piece's work ends anyway,
	// as the message says).
	warn string
}

// run starts s (a lifecycle.Service) and has teardown stop it.
func (b *Broker) run(ctx context.Context, name string, s lifecycle.Service) error {
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("broker: starting %s: %w", name, err)
	}
	b.running = append(b.running, running{name: name, stop: s.Stop})
	return nil
}

// runWarn is run for a service whose failed stop is only a warning.
func (b *Broker) runWarn(ctx context.Context, name, warn string, s lifecycle.Service) error {
	if err := b.run(ctx, name, s); err != nil {
		return err
	}
	b.running[len(b.running)-1].warn = warn
	return nil
}

// onStop has teardown call stop, in order with the services: for what is
// open rather than started (the pool, the NATS connections, the listener).
func (b *Broker) onStop(name string, stop func(ctx context.Context) error) {
	b.running = append(b.running, running{name: name, stop: stop})
}

// stopAll stops what started, last started first, and joins the errors.
func (b *Broker) stopAll(ctx context.Context) error {
	var errs []error
	for i := len(b.running) - 1; i >= 0; i-- {
		r := b.running[i]
		err := r.stop(ctx)
		switch {
		case err == nil:
		case r.warn != "":
			b.log.Warn(r.warn, "err", err)
		default:
			errs = append(errs, fmt.Errorf("broker: stopping %s: %w", r.name, err))
		}
	}
	b.running = nil
	return errors.Join(errs...)
}

// managedPG is the managed PostgreSQL (localpg) as a lifecycle.Service.
type managedPG struct {
	cfg     localpg.Config
	cluster *localpg.Cluster
}

// newManagedPG refuses an empty DataDir.
func newManagedPG(cfg localpg.Config) (*managedPG, error) {
	if cfg.DataDir == "" {
		return nil, &lifecycle.SettingError{Setting: "localpg.Config.DataDir", Value: `""`, Want: "a folder (QUEEN_DATA_DIR)"}
	}
	return &managedPG{cfg: cfg}, nil
}

// Start starts (initialising first if needed) the cluster; ctx bounds it
// (localpg.Start).
func (p *managedPG) Start(ctx context.Context) (err error) {
	if p.cluster == nil {
		p.cluster, err = localpg.Start(ctx, p.cfg)
	}
	return err
}

// Stop stops the server and waits for it to exit (at most 70 s,
// localpg.Cluster.Stop) whatever ctx says: a server still stopping would
// hold the data folder the next start needs. Idempotent.
func (p *managedPG) Stop(context.Context) error {
	if p.cluster == nil {
		return nil
	}
	return p.cluster.Stop()
}

// embeddedNATS is the embedded NATS server as a lifecycle.Service.
type embeddedNATS struct {
	listen     string
	configFile string
	opts       *server.Options
	srv        *server.Server
}

// newEmbeddedNATS refuses a listen address that is not host:port
// (QUEEN_NATS_LISTEN) and a configuration file (QUEEN_NATS_CONFIG,
// Config.NATSConfigFile; "" none) nats-server refuses. The file's
// authorization and tls apply; the listen address, the payload and
// buffer limits, signals and logging are the broker's.
func newEmbeddedNATS(listen, configFile string) (*embeddedNATS, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("broker: bad NATS listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("broker: bad NATS listen port %q", portStr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts, err := embeddedOptions(host, port, configFile)
	if err != nil {
		return nil, err
	}
	return &embeddedNATS{listen: listen, configFile: configFile, opts: opts}, nil
}

// embeddedOptions are the embedded server's options on host:port: the
// configuration file's (none when ""), then the broker's own.
func embeddedOptions(host string, port int, configFile string) (opts *server.Options, err error) {
	opts = &server.Options{}
	if configFile != "" {
		if opts, err = server.ProcessConfigFile(configFile); err != nil {
			return nil, fmt.Errorf("broker: NATS configuration QUEEN_NATS_CONFIG=%s: %w", configFile, err)
		}
	}
	opts.ServerName = cmp.Or(opts.ServerName, "queen-embedded")
	opts.Host, opts.Port = host, port
	// 16 MiB bodies plus room for headers (SPEC.md §11).
	opts.MaxPayload = queen.MaxBodyBytes + 64<<10
	// Per-connection outbound buffer: the broker's connections carry many
	// 16 MiB bodies at once; a smaller one made the server drop them as
	// slow consumers under large-payload load.
	opts.MaxPending = 1 << 30
	opts.NoSigs, opts.NoLog = true, true
	return opts, nil
}

// reload reads the configuration file again and applies it to the running
// server with nats-server's own reload (server.ReloadOptions): changed
// users and permissions hold for new connections, and connections whose
// user is gone or no longer allowed are closed by the server. A file that
// does not load, or a change nats-server cannot apply live, is an error and
// the running configuration stays.
func (n *embeddedNATS) reload() error {
	if n.configFile == "" || n.srv == nil {
		return errors.New("broker: no embedded NATS configuration to reload (QUEEN_NATS_CONFIG is not set)")
	}
	addr, ok := n.srv.Addr().(*net.TCPAddr)
	if !ok {
		return errors.New("broker: the embedded NATS server has no listener")
	}
	opts, err := embeddedOptions(n.opts.Host, addr.Port, n.configFile)
	if err != nil {
		return err
	}
	if err := n.srv.ReloadOptions(opts); err != nil {
		return fmt.Errorf("broker: NATS configuration QUEEN_NATS_CONFIG=%s not applied: %w", n.configFile, err)
	}
	return nil
}

// Start starts the server and returns once it takes connections (at most
// 10 s).
func (n *embeddedNATS) Start(context.Context) error {
	if n.opts.Port != server.RANDOM_PORT {
		// The embedded server only logs a clash; find it here, at once.
		l, err := net.Listen("tcp", n.listen)
		if err != nil {
			return fmt.Errorf("broker: embedded NATS cannot listen on %s: %w (set QUEEN_NATS_LISTEN, or NATS_URL for an external server)", n.listen, err)
		}
		l.Close()
	}
	srv, err := server.NewServer(n.opts)
	if err != nil {
		return fmt.Errorf("broker: embedded NATS: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("broker: embedded NATS did not start on %s (port in use?)", n.listen)
	}
	n.srv = srv
	return nil
}

// URL is the server's client URL, once started.
func (n *embeddedNATS) URL() string { return n.srv.ClientURL() }

// Stop shuts the server down and waits for it. Idempotent.
func (n *embeddedNATS) Stop(context.Context) error {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
	}
	return nil
}

// httpDrain bounds how long Stop waits for HTTP requests in flight (a slow
// client still sending its body) before cutting their connections.
const httpDrain = 10 * time.Second

// frontDoors is the NATS micro service and the HTTP gateway, started and
// stopped together: both stop taking requests at once and answer the ones
// in flight. The HTTP server already runs (startEngines) behind gate,
// which answers "starting" until Start opens it.
type frontDoors struct {
	svc  *transport.Service
	nats *transport.NATSService
	http *http.Server
	gate *transport.Gate
	log  *slog.Logger
}

// Start subscribes the NATS endpoints, then opens the HTTP gate to the
// gateway's routes (svc.Handler).
func (d *frontDoors) Start(ctx context.Context) error {
	if err := d.nats.Start(ctx); err != nil {
		return err
	}
	d.gate.Open(d.svc.Handler())
	return nil
}

// Stop answers the parked long polls (empty), then drains both doors at
// once: HTTP connections still sending a body get httpDrain to finish. A
// NATS drain failure is only logged (the requests in flight are answered
// all the same).
func (d *frontDoors) Stop(ctx context.Context) error {
	d.svc.StopPolls()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := d.nats.Stop(ctx); err != nil {
			d.log.Warn("NATS service stop", "err", err)
		}
	}()
	hctx, cancel := context.WithTimeout(ctx, httpDrain)
	if err := d.http.Shutdown(hctx); err != nil {
		d.log.Warn("HTTP connections cut after the drain period", "drain", httpDrain, "err", err)
		d.http.Close()
	}
	cancel()
	wg.Wait()
	return nil
}
