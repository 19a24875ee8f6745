package queen

import "time"

// QueueInfo describes a queue (GET /api/v1/resources/queues/:queue).
type QueueInfo struct {
	Name      string    `json:"name"`
	Namespace string    `json:"namespace"`
	Task      string    `json:"task"`
	Options   Options   `json:"options"`
	CreatedAt time.Time `json:"createdAt"`
	// Partitions counts the queue's partitions.
	Partitions int64 `json:"partitions"`
	// Messages counts every message ever stored in the queue (the sum of its
	// partitions' allocators), retained or not.
	Messages int64 `json:"messages"`
}

// ConfigureResult is the outcome of a configure call (SPEC.md §6).
type ConfigureResult struct {
	Queue     string            `json:"queue"`
	Namespace string            `json:"namespace"`
	Task      string            `json:"task"`
	Options   Options           `json:"options"`
	Changed   map[string]Change `json:"changed"`
	// Created reports that the call created the queue.
	Created bool `json:"created"`
}

// QueueSummary is one row of the queue listing.
type QueueSummary struct {
	Name       string    `json:"name"`
	Namespace  string    `json:"namespace"`
	Task       string    `json:"task"`
	CreatedAt  time.Time `json:"createdAt"`
	Partitions int64     `json:"partitions"`
	// Messages is every offset ever allocated (stored or retained away).
	Messages int64 `json:"messages"`
	// Depth is the messages above the queue-mode group's cursors.
	Depth int64 `json:"depth"`
	// Options are the queue's effective options (SPEC.md §6), as in QueueInfo.
	Options Options `json:"options"`
	// QueuedSinceStart and DuplicateSinceStart count the push items of this
	// queue answered queued and duplicate since the answering broker started
	// (queen_queue_push_items_total; in a cluster each broker counts the
	// pushes that entered through it). DuplicateRate is
	// DuplicateSinceStart / (QueuedSinceStart + DuplicateSinceStart), null
	// before the first such item.
	QueuedSinceStart    int64    `json:"queuedSinceStart"`
	DuplicateSinceStart int64    `json:"duplicateSinceStart"`
	DuplicateRate       *float64 `json:"duplicateRate"`
}

// ConfigureRequest is a decoded POST /api/v1/configure body (SPEC.md §6).
type ConfigureRequest struct {
	Queue, Namespace, Task string
	// NamespaceSet / TaskSet report that the body gave the label: a label
	// the body leaves out keeps its stored value (labels are not options:
	// the full replace is about options).
	NamespaceSet, TaskSet bool
	// Merge is "mode":"merge"; "mode":"replace", null or absent is a full replace.
	Merge bool
	// Options are the options the body gives, validated (an empty patch when
	// it gives none): the store applies them to DefaultOptions(), or to the
	// stored options with Merge.
	Options OptionsPatch
	// Guard, when set, is called by the store under the queue's row lock,
	// with the options before (the defaults for a queue the call creates)
	// and after the change: an error aborts the configure (nothing is
	// written, a queue it would create included) and is returned as is.
	// The transports use it for the admin token (Options.DataLoss).
	Guard func(created bool, old, next Options) error `json:"-"`
}
