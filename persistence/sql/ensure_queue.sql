-- $1 name, $2 options (defaults), $3 dedup window seconds, $4 dedup check payload.
INSERT INTO queen.queues (name, options, dedup_window_seconds, dedup_check_payload)
VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO NOTHING
