-- The queue option dedupCheckPayload (SPEC.md §6), read with the window
-- under the partition row lock by the push probe (bundle_probe), as
-- dedup_window_seconds is. The options column keeps every option by its
-- wire name; this column is the copy the push path reads.
ALTER TABLE queen.queues ADD COLUMN dedup_check_payload boolean NOT NULL DEFAULT false;
