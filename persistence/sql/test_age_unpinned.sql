-- Tests only (Store.AgePartitions): the segments of partitions $1 (uuid[])
-- whose message ids are derived (legacy_ids empty, layout 3): partition,
-- first and last offset, created_at. Their ids are written to legacy_ids
-- (test_age_pin) before test_age moves created_at, so ids stay what the
-- pushes answered, as they do when time really passes.
SELECT p.id, s.first_offset, s.last_offset, s.created_at
  FROM queen.segments s
  JOIN queen.partitions p ON p.num = s.partition_num
 WHERE p.id = ANY ($1::uuid[]) AND octet_length(s.legacy_ids) = 0
