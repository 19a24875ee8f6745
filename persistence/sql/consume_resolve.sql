-- Resolves transaction-id hashes $2 in partition $1 through the sidecar
-- (SPEC.md §4): per hash, the lowest offset above the group's cursor (read
-- under the consumer row lock this transaction holds; $3 the group), or NULL,
-- and whether the hash is in the sidecar at all (queen.sidecar_find: an
-- entry counts while its time range lives).
SELECT k.hash,
       min(x."offset") FILTER (WHERE x."offset" > c."cursor"),
       max(x."offset")
FROM unnest($2::uuid[]) AS k (hash)
JOIN queen.consumers c ON c.partition_id = $1 AND c.consumer_group = $3
CROSS JOIN LATERAL queen.sidecar_find($1, k.hash, '-infinity', '-infinity', 'infinity', false) x
GROUP BY k.hash
