-- $1 name, $2 namespace, $3 task, $4 options, $5 dedup window seconds,
-- $6 dedup check payload.
UPDATE queen.queues
   SET namespace = $2, task = $3, options = $4, dedup_window_seconds = $5, dedup_check_payload = $6,
       updated_at = clock_timestamp()
 WHERE name = $1
