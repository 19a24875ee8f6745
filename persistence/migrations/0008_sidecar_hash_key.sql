-- A smaller per-hash index (SPEC.md §7, §8): log_txn_hashes_lookup keys on
-- the hash alone, without the partition id and the INCLUDE columns. An
-- entry drops from 68 to 28 bytes, so the current time range's btree,
-- which takes one random insert per stored message, stays in shared
-- buffers for longer ranges and writes fewer pages (and full-page images
-- after each checkpoint) at full load. A lookup still gives one index
-- descent per hash; the partition id, offset, segment and created_at come
-- from the heap row of a hit (a hash is 128 bits of XXH3: rows of other
-- partitions under the same hash are the same transactionId reused across
-- partitions, filtered out there).
DROP INDEX queen.log_txn_hashes_lookup;
CREATE INDEX log_txn_hashes_lookup ON queen.log_txn_hashes (hash);
