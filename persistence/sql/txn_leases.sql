-- The consumer rows that hold leases $1 (live or expired), so a
-- transaction can lock them in its global order and check, under the locks,
-- that each of its requiredLeases is live (SPEC.md §5).
SELECT partition_id, consumer_group
FROM queen.consumers
WHERE lease_id = ANY ($1::uuid[])
