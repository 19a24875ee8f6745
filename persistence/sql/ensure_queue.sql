-- $1 name, $2 options (defaults), $3 dedup window seconds.
INSERT INTO queen.queues (name, options, dedup_window_seconds)
VALUES ($1, $2, $3)
ON CONFLICT (name) DO NOTHING
