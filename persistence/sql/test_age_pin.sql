-- Tests only (Store.AgePartitions): stores the derived message ids of the
-- segments test_age_unpinned listed, parallel arrays: $1 partition (uuid[]),
-- $2 first offset (bigint[]), $3 the ids, 16 bytes each (bytea[]).
UPDATE queen.segments s
   SET legacy_ids = u.ids
  FROM unnest($1::uuid[], $2::bigint[], $3::bytea[]) AS u (p, f, ids)
  JOIN queen.partitions n ON n.id = u.p
 WHERE s.partition_num = n.num AND s.first_offset = u.f
