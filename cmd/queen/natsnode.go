package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/client"
)

// natsNodeCmd is the hidden `queen nats-node`: one nats-server node of a
// NATS cluster on loopback, run in a process of its own until SIGINT or
// SIGTERM, so that `queen loadtest --nats-nodes N` can SIGKILL a node for
// real (SPEC.md §9: the broker on a NATS cluster). Its options are the
// embedded server's (16 MiB bodies, a 1 GiB outbound buffer per
// connection); its log goes to stderr.
func natsNodeCmd() *cobra.Command {
	var name, listen, cluster, clusterName, routes, monitor string
	cmd := &cobra.Command{
		Use:    "nats-node",
		Short:  "Run one node of a NATS cluster (for queen loadtest --nats-nodes)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := natsNodeOptions(name, listen, cluster, clusterName, routes, monitor)
			if err != nil {
				return err
			}
			s, err := server.NewServer(opts)
			if err != nil {
				return fmt.Errorf("nats-node %s: %w", name, err)
			}
			s.ConfigureLogger()
			s.Start()
			if !s.ReadyForConnections(30 * time.Second) {
				s.Shutdown()
				return fmt.Errorf("nats-node %s: not ready for connections on %s within 30s", name, listen)
			}
			<-cmd.Context().Done()
			s.Shutdown()
			s.WaitForShutdown()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "queen-nats", "the node's server name (unique in its cluster)")
	f.StringVar(&listen, "listen", "127.0.0.1:4222", "host:port of the client listener")
	f.StringVar(&cluster, "cluster", "", "host:port of the cluster (route) listener (empty: no cluster)")
	f.StringVar(&clusterName, "cluster-name", "queen", "the cluster's name (the same on every node)")
	f.StringVar(&routes, "routes", "", "comma-separated nats://host:port route URLs of the other nodes")
	f.StringVar(&monitor, "monitor", "", "host:port of the HTTP monitoring endpoint (/varz, /connz, /routez; empty: none)")
	return cmd
}

// natsNodeOptions turns the nats-node flags into server options; a bad
// host:port or route URL is an error naming the flag.
func natsNodeOptions(name, listen, cluster, clusterName, routes, monitor string) (*server.Options, error) {
	host, port, err := splitHostPort("--listen", listen)
	if err != nil {
		return nil, err
	}
	o := &server.Options{
		ServerName: name,
		Host:       host,
		Port:       port,
		// As the embedded server (broker/lifecycle.go): 16 MiB bodies plus
		// headers (SPEC.md §11), a large outbound buffer per connection.
		MaxPayload: queen.MaxBodyBytes + 64<<10,
		MaxPending: 1 << 30,
		// The command handles SIGINT/SIGTERM (a clean shutdown).
		NoSigs: true,
	}
	if monitor != "" {
		if o.HTTPHost, o.HTTPPort, err = splitHostPort("--monitor", monitor); err != nil {
			return nil, err
		}
	}
	if cluster != "" {
		if o.Cluster.Host, o.Cluster.Port, err = splitHostPort("--cluster", cluster); err != nil {
			return nil, err
		}
		o.Cluster.Name = clusterName
	}
	if routes != "" {
		if cluster == "" {
			return nil, errors.New("--routes needs --cluster")
		}
		list, err := client.ParseNATSURLs(routes)
		if err != nil {
			return nil, fmt.Errorf("--routes: %w", err)
		}
		o.Routes = server.RoutesFromStr(strings.Join(list, ","))
	}
	return o, nil
}

// splitHostPort parses a host:port flag with a port from 1 to 65535.
func splitHostPort(flag, hp string) (string, int, error) {
	host, ps, err := net.SplitHostPort(hp)
	if err == nil {
		var port int
		if port, err = strconv.Atoi(ps); err == nil && port > 0 && port < 65536 {
			return host, port, nil
		}
	}
	return "", 0, fmt.Errorf("%s %q: want host:port", flag, hp)
}
