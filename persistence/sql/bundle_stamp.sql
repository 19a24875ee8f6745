-- The stamp of a bundle's or a transaction's writes (SPEC.md §2): its
-- segments' and sidecar rows' created_at, read on PostgreSQL's clock once
-- the commit holds all of its row locks (a push: after bundle_bump, which
-- takes the last of them; a transaction: after bundle_lock and the window
-- probe), so each partition's stamps rise from commit to commit (the next
-- writer's stamp is read after this one's locks are released). Also
-- whether a range of segments_timed holds it: a segment of a queue with
-- retentionSeconds is timed only then, else it goes to segments_kept
-- (migration 0010; persistence.bundleRows.copySegments). A configure that
-- removes the retention meanwhile leaves the segment timed, and its range
-- is then kept: a range is dropped only when every queue with rows in it
-- still has a retention they are past (segment_range_keepers).
SELECT c.now,
       EXISTS (SELECT 1 FROM queen.segment_ranges r WHERE r.lo <= c.now AND r.hi > c.now) AS ranged
  FROM (SELECT clock_timestamp() AS now) c
