-- Writes the fingerprints of the compacted sidecar range starting at $1
-- from its level-1 blocks (queen.sidecar_prints_refill, migration 0021):
-- the hashes read, or -1 when the range is not compacted or has them.
SELECT queen.sidecar_prints_refill($1)
