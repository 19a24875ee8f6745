-- The consumer rows that hold leases $1 (live or expired, unsettled), so a
-- transaction can lock them in its global order and check, under the locks,
-- that each of its requiredLeases is live (SPEC.md §5). They are found
-- through queen.consumer_leases (migration 0014): each lease row by its
-- primary key, then the partitions it lists by the consumer rows' primary
-- key, keeping those whose lease is still that lease. A lease whose row the
-- retention pass deleted has expired: it finds no row, and the check refuses
-- it as it refuses an expired one.
SELECT c.partition_id, c.consumer_group
  FROM queen.consumer_leases l
  JOIN queen.consumers c ON c.partition_id = ANY (l.partition_ids) AND c.consumer_group = l.consumer_group
 WHERE l.lease_id = ANY ($1::uuid[]) AND c.lease_id = l.lease_id
