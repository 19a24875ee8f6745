-- One level-1 sidecar entry (migration 0024), 28 bytes big-endian: the
-- partition's number (queen.partitions.num, 8), the first offset of the
-- message's segment (8), the message's index in it (4) and the segment's
-- created_at (timestamptz_send: microseconds since 2000-01-01, 8). A block
-- row of queen.hash_blocks holds its hashes in `hashes` and, in the same
-- order, their entries end to end in `entries`; queen.hash_entry reads the
-- i-th back.
CREATE OR REPLACE FUNCTION queen.hash_entry_pack(num bigint, first bigint, idx integer, stamp timestamptz) RETURNS bytea
    LANGUAGE sql IMMUTABLE
AS $$ SELECT int8send(num) || int8send(first) || int4send(idx) || timestamptz_send(stamp) $$;
