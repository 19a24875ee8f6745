-- Removes the consumer row of (partition $1, group $2) that an ack call
-- created and left as it was (every ack unresolvable or stale): a failed ack
-- leaves no cursor row for a group that never popped.
DELETE FROM queen.consumers WHERE partition_id = $1 AND consumer_group = $2
