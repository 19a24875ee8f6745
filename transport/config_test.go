package transport

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// TestNewNotifierRefusesInvalidSettings: a bad setting is refused, named.
func TestNewNotifierRefusesInvalidSettings(t *testing.T) {
	nc := &nats.Conn{}
	for _, c := range []struct {
		cfg     NotifierConfig
		setting string
	}{
		{NotifierConfig{Local: &wakes{}}, "NotifierConfig.Conn"},
		{NotifierConfig{Conn: nc}, "NotifierConfig.Local"},
		{NotifierConfig{Conn: nc, Local: &wakes{}, Linger: -time.Millisecond}, "NotifierConfig.Linger"},
	} {
		_, err := NewNotifier(c.cfg)
		requireRefused(t, err, c.setting)
	}
	n, err := NewNotifier(NotifierConfig{Conn: nc, Local: &wakes{}})
	require.NoError(t, err)
	require.Equal(t, NotifyLinger, n.linger)
	require.NoError(t, n.Stop(context.Background()), "a notifier never started stops")
}

// requireRefused checks that err refuses setting by name (a *queen.SettingError).
func requireRefused(t *testing.T, err error, setting string) {
	t.Helper()
	var se *queen.SettingError
	require.ErrorAs(t, err, &se)
	require.Equal(t, setting, se.Setting)
	require.ErrorContains(t, err, "transport: "+setting+" is ")
}

// TestNewNATSRefusesInvalidSettings: as for the Notifier.
func TestNewNATSRefusesInvalidSettings(t *testing.T) {
	s, nc := &Service{}, &nats.Conn{}
	for _, c := range []struct {
		cfg     NATSConfig
		setting string
	}{
		{NATSConfig{Version: "1.0.0"}, "NATSConfig.Conn"},
		{NATSConfig{Conn: nc}, "NATSConfig.Version"},
		{NATSConfig{Conn: nc, Version: "v1"}, "NATSConfig.Version"},
	} {
		_, err := s.NewNATS(c.cfg)
		requireRefused(t, err, c.setting)
	}
	ns, err := s.NewNATS(NATSConfig{Conn: nc, Version: "1.2.3-rc.1"})
	require.NoError(t, err)
	require.NoError(t, ns.Stop(context.Background()), "a service never started stops")
}
