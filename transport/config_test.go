package transport

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// TestNewNotifierRefusesInvalidSettings: a bad setting of an Announcer or
// a Notifier is refused, named.
func TestNewNotifierRefusesInvalidSettings(t *testing.T) {
	nc := &nats.Conn{}
	for _, c := range []struct {
		cfg     AnnouncerConfig
		setting string
	}{
		{AnnouncerConfig{}, "AnnouncerConfig.Conn"},
		{AnnouncerConfig{Conn: nc, Linger: -time.Millisecond}, "AnnouncerConfig.Linger"},
	} {
		_, err := NewAnnouncer(c.cfg)
		require.ErrorContains(t, err, "transport: "+c.setting+" is ")
	}
	a, err := NewAnnouncer(AnnouncerConfig{Conn: nc})
	require.NoError(t, err)
	require.Equal(t, NotifyLinger, a.linger)
	for _, c := range []struct {
		cfg     NotifierConfig
		setting string
	}{
		{NotifierConfig{Local: &wakes{}}, "NotifierConfig.Announcer"},
		{NotifierConfig{Announcer: a}, "NotifierConfig.Local"},
	} {
		_, err := NewNotifier(c.cfg)
		require.ErrorContains(t, err, "transport: "+c.setting+" is ")
	}
	n, err := NewNotifier(NotifierConfig{Announcer: a, Local: &wakes{}})
	require.NoError(t, err)
	require.NoError(t, n.Stop(context.Background()), "a notifier never started stops")
	require.NoError(t, a.Stop(context.Background()), "an announcer that announced nothing stops")
}
