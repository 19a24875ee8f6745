package shards

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// noLeases is a LeaseStore for constructors that never call it.
type noLeases struct{ LeaseStore }

// TestNewMembershipRefusesInvalidSettings: a bad setting is refused at
// construction, named; zero values take the defaults.
func TestNewMembershipRefusesInvalidSettings(t *testing.T) {
	for _, c := range []struct {
		cfg     MembershipConfig
		setting string
	}{
		{MembershipConfig{}, "MembershipConfig.Store"},
		{MembershipConfig{Store: noLeases{}, Count: -1}, "MembershipConfig.Count"},
		{MembershipConfig{Store: noLeases{}, Lease: -time.Second}, "MembershipConfig.Lease"},
	} {
		_, err := NewMembership(c.cfg)
		require.ErrorContains(t, err, "shards: "+c.setting+" is ")
	}
	m, err := NewMembership(MembershipConfig{Store: noLeases{}})
	require.NoError(t, err)
	require.Equal(t, DefaultLease, m.Lease())
}

// TestNewServerRefusesInvalidSettings: as for Membership.
func TestNewServerRefusesInvalidSettings(t *testing.T) {
	nc, p := &nats.Conn{}, &recorder{}
	for _, c := range []struct {
		cfg     ServerConfig
		setting string
	}{
		{ServerConfig{Pusher: p}, "ServerConfig.Conn"},
		{ServerConfig{Conn: nc}, "ServerConfig.Pusher"},
		{ServerConfig{Conn: nc, Pusher: p, Count: -1}, "ServerConfig.Count"},
		{ServerConfig{Conn: nc, Pusher: p, Timeout: -time.Second}, "ServerConfig.Timeout"},
		{ServerConfig{Conn: nc, Pusher: p, MaxPayloadBytes: -1}, "ServerConfig.MaxPayloadBytes"},
		{ServerConfig{Conn: nc, Pusher: p, PendingMsgs: -1}, "ServerConfig.PendingMsgs"},
		{ServerConfig{Conn: nc, Pusher: p, PendingBytes: -1}, "ServerConfig.PendingBytes"},
	} {
		_, err := NewServer(c.cfg)
		require.ErrorContains(t, err, "shards: "+c.setting+" is ")
	}
	_, err := NewServer(ServerConfig{Conn: nc, Pusher: p})
	require.NoError(t, err)
}

// TestNewRouterRefusesInvalidSettings: as for Membership; every bad setting
// is named, not only the first.
func TestNewRouterRefusesInvalidSettings(t *testing.T) {
	for _, c := range []struct {
		cfg     RouterConfig
		setting string
	}{
		{RouterConfig{}, "RouterConfig.Conn"},
		{RouterConfig{Conn: &nats.Conn{}, Owners: owners(testOwner)}, "RouterConfig.Local"},
		{RouterConfig{Conn: &nats.Conn{}, Count: -1}, "RouterConfig.Count"},
		{RouterConfig{Conn: &nats.Conn{}, HopTimeout: -time.Second}, "RouterConfig.HopTimeout"},
	} {
		_, err := NewRouter(c.cfg)
		require.ErrorContains(t, err, "shards: "+c.setting+" is ")
	}
	_, err := NewRouter(RouterConfig{Count: -1, HopTimeout: -1})
	for _, setting := range []string{"RouterConfig.Conn", "RouterConfig.Count", "RouterConfig.HopTimeout"} {
		require.ErrorContains(t, err, setting+" is ")
	}
}
