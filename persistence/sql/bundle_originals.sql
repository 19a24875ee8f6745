-- The packed frames of the segments holding duplicates' originals, for the
-- dedupCheckPayload comparison (SPEC.md §6). Run only when a partition whose
-- queue has the option on got a duplicate, in the push's transaction after
-- bundle_probe: new messages never reach it. $1 partition ids, $2 the
-- segments' first offsets (parallel arrays, one entry per distinct segment;
-- bundle_probe names them). A segment that is gone returns no row.
--
-- One primary-key lookup of the partition's number (migration 0025) and one
-- index lookup per segment (LATERAL ... OFFSET 0 keeps it a per-row lookup
-- whatever the statistics).
SELECT k.partition_id, k.first_offset, s.frames
  FROM unnest($1::uuid[], $2::bigint[]) AS k (partition_id, first_offset)
 CROSS JOIN LATERAL (
    SELECT s.frames
      FROM queen.segments s
     WHERE s.partition_num = (SELECT n.num FROM queen.partitions n WHERE n.id = k.partition_id)
       AND s.first_offset = k.first_offset
    OFFSET 0
 ) s
