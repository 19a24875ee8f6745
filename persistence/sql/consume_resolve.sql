-- Resolves transaction-id hashes $2 in partition $1 through the sidecar
-- (SPEC.md §4): per hash, the lowest offset above the group's cursor (read
-- under the consumer row lock this transaction holds; $3 the group), or NULL,
-- and whether the hash is in the sidecar at all. A log_txn_hashes row counts
-- only while its segment's log_txns row exists.
SELECT h.hash,
       min(h."offset") FILTER (WHERE h."offset" > c."cursor"),
       max(h."offset")
FROM queen.log_txn_hashes h
JOIN queen.log_txns t ON t.partition_id = h.partition_id AND t.first_offset = h.segment
JOIN queen.consumers c ON c.partition_id = h.partition_id AND c.consumer_group = $3
WHERE h.partition_id = $1 AND h.hash = ANY ($2::uuid[])
GROUP BY h.hash
