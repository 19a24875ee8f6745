-- The hash cache's hydration (SPEC.md §8): the sidecar rows of partition $1
-- for segments starting after $2 and at or before $3, stored inside the last
-- $4 seconds (PostgreSQL's clock), in offset order. Reads the primary key
-- range; no lock.
SELECT first_offset, created_at, hashes
FROM queen.log_txns
WHERE partition_id = $1
  AND first_offset > $2
  AND first_offset <= $3
  AND created_at > clock_timestamp() - make_interval(secs => $4::bigint)
ORDER BY first_offset
