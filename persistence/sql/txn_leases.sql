-- The consumer rows that hold leases $1 (live or expired, unsettled), so a
-- transaction can lock them in its global order and check, under the locks,
-- that each of its requiredLeases is live (SPEC.md §5). They are found
-- through queen.consumer_leases (migration 0014): each lease row by its
-- primary key, then the partitions it lists (one row per element of
-- partition_ids) by the consumer rows' primary key, keeping those whose
-- lease is still that lease; the store runs it planned for its arguments on
-- every call (TestLeasePlansStayIndexed). A lease whose row the
-- retention pass deleted has expired: it finds no row, and the check refuses
-- it as it refuses an expired one.
SELECT c.partition_id, c.consumer_group
  FROM (SELECT l.lease_id, unnest(l.partition_ids) AS pid, l.consumer_group AS grp
          FROM queen.consumer_leases l
         WHERE l.lease_id = ANY ($1::uuid[])) v
  JOIN queen.consumers c ON c.partition_id = v.pid AND c.consumer_group = v.grp
 WHERE c.lease_id = v.lease_id
