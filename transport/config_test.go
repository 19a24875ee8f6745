package transport

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
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
		require.ErrorContains(t, err, "transport: "+c.setting+" is ")
	}
	n, err := NewNotifier(NotifierConfig{Conn: nc, Local: &wakes{}})
	require.NoError(t, err)
	require.Equal(t, NotifyLinger, n.linger)
	require.NoError(t, n.Stop(context.Background()), "a notifier never started stops")
}
