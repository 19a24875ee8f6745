package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/queen-mq/queen-go/transport/client"
)

// clientFlags say how a client command (queen push, ...) reaches a broker:
// over NATS (the default) or over the HTTP gateway. Their defaults name the
// listeners `queen serve` opens with the same environment, so a client run
// beside a broker started with QUEEN_NATS_LISTEN or QUEEN_HTTP_ADDR finds it.
type clientFlags struct {
	natsURL string    // --nats-url
	server  string    // --server
	via     string    // --via
	tls     clientTLS // --ca-file, --client-cert, --client-key
	// natsCreds, natsNkey, natsUser: --nats-creds, --nats-nkey,
	// --nats-user (the password from NATS_PASSWORD).
	natsCreds, natsNkey, natsUser string
}

// defaultNATSURL is where serve's NATS is, and which setting says so:
// NATS_URL (serve then uses that external server), else the embedded
// server's QUEEN_NATS_LISTEN, else its default 127.0.0.1:4222.
func defaultNATSURL() (url, from string) {
	if v := os.Getenv("NATS_URL"); v != "" {
		return v, "NATS_URL"
	}
	if v := os.Getenv("QUEEN_NATS_LISTEN"); v != "" {
		return "nats://" + dialAddr(v), "QUEEN_NATS_LISTEN=" + v
	}
	return "nats://127.0.0.1:4222", "the default (QUEEN_NATS_LISTEN unset)"
}

// defaultServer is serve's HTTP gateway: QUEEN_HTTP_ADDR, else 127.0.0.1:6632.
func defaultServer() (url, from string) {
	if v := os.Getenv("QUEEN_HTTP_ADDR"); v != "" {
		return "http://" + dialAddr(v), "QUEEN_HTTP_ADDR=" + v
	}
	return "http://127.0.0.1:6632", "the default (QUEEN_HTTP_ADDR unset)"
}

// dialAddr turns a listen address into one to dial: an empty or unspecified
// host (":4222", "0.0.0.0:4222", "[::]:4222") is the loopback address.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

func (c *clientFlags) register(cmd *cobra.Command) {
	natsURL, _ := defaultNATSURL()
	server, _ := defaultServer()
	f := cmd.Flags()
	f.StringVar(&c.natsURL, "nats-url", natsURL, "NATS server of the broker, or a comma-separated list of a NATS cluster's servers (env NATS_URL, else nats://<QUEEN_NATS_LISTEN>)")
	f.StringVar(&c.server, "server", server, "HTTP gateway of the broker, for --via http; giving it implies --via http (env: http://<QUEEN_HTTP_ADDR>)")
	f.StringVar(&c.via, "via", "nats", "how to reach the broker: nats or http (--server given: http)")
	f.StringVar(&c.tls.caFile, "ca-file", envOr("QUEEN_CA_FILE", os.Getenv("NATS_CA_FILE")), "PEM CA to trust for an https:// --server or a NATS server with TLS, besides the system's (env QUEEN_CA_FILE, else NATS_CA_FILE)")
	c.tls.registerCert(f)
	f.StringVar(&c.natsCreds, "nats-creds", os.Getenv("NATS_CREDS"), "NATS credentials file (user JWT and nkey seed) (env NATS_CREDS)")
	f.StringVar(&c.natsNkey, "nats-nkey", os.Getenv("NATS_NKEY"), "file holding a NATS user's nkey seed (env NATS_NKEY)")
	f.StringVar(&c.natsUser, "nats-user", os.Getenv("NATS_USER"), "NATS user; its password from env NATS_PASSWORD (env NATS_USER)")
}

// natsAuth is the NATS credentials and CA of the flags.
func (c *clientFlags) natsAuth() client.NATSAuth {
	return client.NATSAuth{Creds: c.natsCreds, NkeySeed: c.natsNkey, User: c.natsUser,
		Password: os.Getenv("NATS_PASSWORD"), CAFile: c.tls.caFile}
}

// transport resolves --via: "nats" or "http".
func (c *clientFlags) transport(cmd *cobra.Command) (string, error) {
	via := c.via
	if cmd.Flags().Changed("server") && !cmd.Flags().Changed("via") {
		via = "http"
	}
	switch via {
	case "nats", "http":
		return via, nil
	}
	return "", fmt.Errorf("--via %q: want nats or http", c.via)
}

// natsSource says where the NATS URL came from, for error messages.
func (c *clientFlags) natsSource(cmd *cobra.Command) string {
	if cmd.Flags().Changed("nats-url") {
		return "--nats-url"
	}
	_, from := defaultNATSURL()
	return from
}

func (c *clientFlags) serverSource(cmd *cobra.Command) string {
	if cmd.Flags().Changed("server") {
		return "--server"
	}
	_, from := defaultServer()
	return from
}

// clientReply is a broker's answer to a client command: the body, and the
// error status and sentence when the broker refused the request.
type clientReply struct {
	body   []byte
	status int // 0 when the request succeeded (2xx, or a NATS reply without error headers)
	text   string
}

// request sends r to the broker with the Go client (package
// transport/client): over NATS on its subject, or over HTTP on its route.
// Failures to reach the broker name what was dialled and from which
// setting; a refusal is a reply with its status.
func (c *clientFlags) request(ctx context.Context, cmd *cobra.Command, r *client.Request) (clientReply, error) {
	via, err := c.transport(cmd)
	if err != nil {
		return clientReply{}, err
	}
	var cl *client.Client
	if via == "http" {
		hc := client.HTTPConfig{URLs: []string{c.server}}
		if hc.TLS, err = c.tls.config(); err != nil {
			return clientReply{}, fmt.Errorf("--ca-file, --client-cert: %w", err)
		}
		cl = client.NewHTTP(hc)
	} else {
		auth, err := c.natsAuth().Options(false)
		if err != nil {
			return clientReply{}, err
		}
		nc, err := client.ConnectNATS(c.natsURL, "queen-cli", auth...)
		if err != nil {
			return clientReply{}, fmt.Errorf("connect to NATS at %s (from %s): %w; is `queen serve` running there? Its embedded NATS listens on QUEEN_NATS_LISTEN (default 127.0.0.1:4222); give --nats-url, or --server http://<QUEEN_HTTP_ADDR> for the HTTP gateway",
				c.natsURL, c.natsSource(cmd), err)
		}
		defer nc.Close()
		cl = client.NewNATS(nc)
	}
	rep, err := cl.Do(ctx, r)
	var na *client.NoAnswerError
	switch {
	case errors.As(err, &na) && via == "http":
		return clientReply{}, fmt.Errorf("%w (server from %s); is `queen serve` running there? Its HTTP gateway listens on QUEEN_HTTP_ADDR (default 127.0.0.1:6632)",
			err, c.serverSource(cmd))
	case errors.As(err, &na):
		return clientReply{}, fmt.Errorf("%s via NATS at %s (from %s): %w", r.Subject, c.natsURL, c.natsSource(cmd), err)
	case err != nil && rep.Status == 0:
		return clientReply{}, fmt.Errorf("--server %q: %w", c.server, err)
	}
	out := clientReply{body: rep.Body}
	if !rep.OK() {
		out.status, out.text = rep.Status, rep.Text
	}
	return out, nil
}
