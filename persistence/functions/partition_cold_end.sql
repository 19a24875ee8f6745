-- The last offset of partition pid computed from what is logged (migration
-- 0019): the greater of its floor (partitions.floor_offset, raised by
-- retention to the last offset of every segment it removes) and the last
-- offset of its newest segment; -1 before the first message. What
-- queen.partition_ends holds for it, and what rebuilds that row after a crash
-- emptied it. One descent of segments_offset per range of segments.
CREATE OR REPLACE FUNCTION queen.partition_cold_end(pid uuid, floor bigint) RETURNS bigint
    LANGUAGE sql STABLE
AS $$
    SELECT GREATEST(floor, (SELECT s.last_offset FROM queen.segments s
                             WHERE s.partition_num = (SELECT n.num FROM queen.partitions n WHERE n.id = pid)
                             ORDER BY s.first_offset DESC
                             LIMIT 1))
$$;
