// Package lifecycle is the one shape of the broker's background services
// (Service) and the error their constructors refuse a setting with
// (SettingError). It holds no state and does no I/O.
package lifecycle

import (
	"context"
	"fmt"
)

// Service is the one lifecycle every background service of the broker has
// (shard membership, the shard server, retention, the notifier, the NATS
// front door, the partition host and its bundler, the managed PostgreSQL):
//
//   - NewX(cfg XConfig) (*X, error) takes every setting in one config struct
//     (no setters, no field writes after construction), applies the
//     documented defaults to zero values and refuses an invalid setting with
//     an error naming it (a *SettingError: "shards: MembershipConfig.Lease
//     is -1s; it must be >= 0 (0 takes the default)"). It starts nothing and does no I/O.
//   - Start(ctx) starts the service's goroutines and subscriptions; ctx
//     bounds the start itself, never the service's life. On error nothing
//     is left running.
//   - Stop(ctx) stops them and waits for them, bounded by ctx (ctx.Err()
//     when the wait was cut short). It is idempotent, and safe before or
//     without Start.
//
// The broker (cmd/queen/internal/broker) starts its services in one order
// and stops them in the reverse order, joining their errors.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// SettingError is an invalid setting refused by a service's constructor.
// Setting names it as its config struct spells it (for example
// "MembershipConfig.Lease"); Value is what was given; Want says what is
// accepted.
type SettingError struct {
	Setting string
	Value   any
	Want    string
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("%s is %v; it must be %s", e.Setting, e.Value, e.Want)
}

// NotNegative returns a *SettingError for setting when v < 0, else nil. It
// is for the settings whose zero value takes a default.
func NotNegative[T ~int | ~int64](setting string, v T) error {
	if v < 0 {
		return &SettingError{Setting: setting, Value: v, Want: ">= 0 (0 takes the default)"}
	}
	return nil
}

// Required returns a *SettingError for setting when missing, else nil: a
// dependency the service cannot run without.
func Required(setting string, missing bool) error {
	if missing {
		return &SettingError{Setting: setting, Value: "unset", Want: "set"}
	}
	return nil
}
