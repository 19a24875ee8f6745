package client

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// The NATS connection settings of brokers and clients (SPEC.md §9: a NATS
// cluster). A server that dies without closing its sockets (a host gone, a
// network cut) is noticed by unanswered pings: one every NATSPingInterval,
// the connection declared stale when NATSMaxPingsOut are outstanding at the
// next, so within NATSPingInterval × (NATSMaxPingsOut + 1) = 15 s. A server
// killed on a live host closes its sockets: that is noticed at once.
const (
	// NATSPingInterval is how often a connection pings its server: 5 s.
	NATSPingInterval = 5 * time.Second
	// NATSMaxPingsOut is how many pings may go unanswered: 2.
	NATSMaxPingsOut = 2
	// NATSConnectTimeout bounds the dial of one server: 5 s.
	NATSConnectTimeout = 5 * time.Second
)

// NATSOptions are the options every NATS connection of the project starts
// from, broker and client alike: name as the connection's name (seen in
// the server's monitoring), NATSConnectTimeout, pings every
// NATSPingInterval with at most NATSMaxPingsOut outstanding (a dead server
// noticed within 15 s), reconnection forever (to any server of the
// cluster, those in the URL list and those the servers advertise), the
// subscriptions kept across reconnections (nats.go sends them again, so a
// micro service's endpoints and the shard subjects are served again), and
// a server entering lame-duck mode (a rolling restart) left at once for
// another one. Options given after these override them.
func NATSOptions(name string) []nats.Option {
	return []nats.Option{
		nats.Name(name),
		nats.Timeout(NATSConnectTimeout),
		nats.PingInterval(NATSPingInterval),
		nats.MaxPingsOutstanding(NATSMaxPingsOut),
		nats.MaxReconnects(-1),
		nats.LameDuckModeHandler(func(nc *nats.Conn) {
			// The server stops taking connections and will close this one
			// within its lame-duck duration: move now, while the others
			// are up. An error means the connection is closed already.
			nc.ForceReconnect() //nolint:errcheck
		}),
	}
}

// ConnectNATS connects to urls, one NATS URL or a comma-separated list of a
// cluster's servers (NATS_URL, --nats-url: "nats://a:4222,nats://b:4222"),
// with NATSOptions(name) followed by extra. A list that is not NATS URLs
// (ParseNATSURLs) is an error before any dial.
func ConnectNATS(urls, name string, extra ...nats.Option) (*nats.Conn, error) {
	list, err := ParseNATSURLs(urls)
	if err != nil {
		return nil, err
	}
	return nats.Connect(strings.Join(list, ","), append(NATSOptions(name), extra...)...)
}

// ParseNATSURLs splits s, one NATS URL or a comma-separated list (spaces
// around the commas allowed), and checks each is nats://, tls://, ws:// or
// wss:// with a host; it returns them trimmed, in order. An empty list or a
// bad URL is an error naming it.
func ParseNATSURLs(s string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		u, err := url.Parse(part)
		if part == "" || err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss") {
			return nil, fmt.Errorf("NATS URL %q in %q: want nats://host:port, or several separated by commas", part, s)
		}
		out = append(out, part)
	}
	return out, nil
}
