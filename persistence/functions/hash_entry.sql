-- The i-th entry (1-based, as the hash's position in the block's `hashes`)
-- of a level-1 block's `entries` (migration 0024; the layout is
-- queen.hash_entry_pack's): the partition's number, the first offset of the
-- message's segment, the message's index in it and the segment's
-- created_at. No row when i lies past the entries (or either is NULL).
-- Not STRICT, so PostgreSQL inlines it into the statement that reads it (a
-- strict set-returning function is called instead, once per entry).
CREATE OR REPLACE FUNCTION queen.hash_entry(entries bytea, i integer)
    RETURNS TABLE (num bigint, first bigint, idx integer, stamp timestamptz)
    LANGUAGE sql IMMUTABLE
AS $$
    SELECT ('x' || encode(substring(entries FROM (i - 1) * 28 + 1 FOR 8), 'hex'))::bit(64)::bigint,
           ('x' || encode(substring(entries FROM (i - 1) * 28 + 9 FOR 8), 'hex'))::bit(64)::bigint,
           ('x' || encode(substring(entries FROM (i - 1) * 28 + 17 FOR 4), 'hex'))::bit(32)::integer,
           '2000-01-01 00:00:00+00'::timestamptz
               + ('x' || encode(substring(entries FROM (i - 1) * 28 + 21 FOR 8), 'hex'))::bit(64)::bigint * interval '1 microsecond'
     WHERE i >= 1 AND i * 28 <= length(entries)
$$;
