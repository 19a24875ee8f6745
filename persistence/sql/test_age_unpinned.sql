-- Tests only (Store.AgePartitions): the segments of partitions $1 (uuid[])
-- whose message ids are derived (legacy_ids empty, layout 3): partition,
-- first and last offset, created_at. Their ids are written to legacy_ids
-- (test_age_pin) before test_age moves created_at, so ids stay what the
-- pushes answered, as they do when time really passes.
SELECT partition_id, first_offset, last_offset, created_at
  FROM queen.segments
 WHERE partition_id = ANY ($1::uuid[]) AND octet_length(legacy_ids) = 0
