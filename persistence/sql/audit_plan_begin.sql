-- The first statement of the audit's read-only transaction (persistence.Audit
-- eachSegment), for that transaction only: no bitmap scan. audit_segments
-- reads each partition's segments above its bound through segments_offset,
-- bounded in time from the bound's segment on (so that the ranges before it
-- are pruned); offered that time bound, the planner chose a bitmap of the
-- BRIN index on created_at over segments_kept, whose pages cover the whole
-- table newer than the bound: a pass at 10,000 partitions without retention
-- took 904 ms against 307 without the bound (60-s runs,
-- pg_stat_statements).
SET LOCAL enable_bitmapscan = off
