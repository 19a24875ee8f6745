-- The transaction-id hashes at offsets $2 (bigint[]) of partition $1, read
-- from each offset's segment (its hashes, 16 bytes per frame, in frame
-- order, migration 0017): an ack naming both an offset and a transactionId
-- is checked against it. An offset whose segment is gone (retention) or
-- never allocated has no row. consume_hash_at_many is the same for many
-- partitions in one statement; keep the two in step.
SELECT o, substring(l.hashes FROM ((o - l.first_offset) * 16 + 1)::int FOR 16)
FROM unnest($2::bigint[]) AS o
CROSS JOIN LATERAL (
    SELECT t.first_offset, t.last_offset, t.hashes
    FROM queen.segments t
    WHERE t.partition_id = $1 AND t.first_offset <= o
    ORDER BY t.first_offset DESC
    LIMIT 1
) l
WHERE l.last_offset >= o AND l.hashes IS NOT NULL
