package target

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// ConfigureQueue configures queue through cl with options (option name →
// value, e.g. leaseTime in seconds, retryLimit, dedupWindowSeconds,
// retentionSeconds), bounded by timeout, and checks that the reply echoes
// each of them. Configure is a full replace (SPEC.md §6): every other
// option goes back to its default. The error names the queue: the call's
// (*queen.Error), a reply that does not decode, or an option the reply
// does not echo.
func ConfigureQueue(ctx context.Context, cl ConsumeClient, queue string, options map[string]int, timeout time.Duration) error {
	body, _ := json.Marshal(map[string]any{"queue": queue, "options": options})
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	data, err := cl.Configure(ctx, body)
	if err != nil {
		return fmt.Errorf("configure queue %s: %w", queue, err)
	}
	var reply struct {
		Options map[string]any `json:"options"`
	}
	if err := json.Unmarshal(data, &reply); err != nil {
		return fmt.Errorf("configure queue %s: the reply does not decode: %v: %s", queue, err, Clip(data))
	}
	for k, v := range options {
		if got, ok := reply.Options[k].(float64); !ok || got != float64(v) {
			return fmt.Errorf("configure queue %s with %s %d: the reply says %s", queue, k, v, Clip(data))
		}
	}
	return nil
}
