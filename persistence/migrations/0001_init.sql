-- The queen schema (SPEC.md §2): queues, partitions with the offset allocator,
-- segments of packed frames, and the log_txns hash sidecar.

CREATE TABLE queen.queues (
    id                   bigserial   PRIMARY KEY,
    name                 text        NOT NULL UNIQUE,
    namespace            text        NOT NULL DEFAULT '',
    task                 text        NOT NULL DEFAULT '',
    -- Read under the partition row lock on every push (SPEC.md §3).
    dedup_window_seconds bigint      NOT NULL DEFAULT 3600,
    -- Every option by its wire name, enforced or not (SPEC.md §6).
    options              jsonb       NOT NULL DEFAULT '{}',
    created_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at           timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- One row per partition. Its row lock is the per-partition write serializer;
-- last_offset is the offset allocator (-1 before the first message).
CREATE TABLE queen.partitions (
    id          uuid        PRIMARY KEY,
    queue_id    bigint      NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    name        text        NOT NULL,
    last_offset bigint      NOT NULL DEFAULT -1,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (queue_id, name)
);

-- One row per committed batch of one partition, covering offsets
-- [first_offset, last_offset]. message_ids holds 16 bytes per frame in frame
-- order (so one id can be sliced out without reading the frames); frames holds
-- the packed frames (persistence/frame.go).
CREATE TABLE queen.segments (
    partition_id uuid        NOT NULL,
    first_offset bigint      NOT NULL,
    last_offset  bigint      NOT NULL,
    created_at   timestamptz NOT NULL,
    message_ids  bytea       NOT NULL,
    frames       bytea       NOT NULL,
    PRIMARY KEY (partition_id, first_offset)
);
-- Uncompressed out-of-line storage lets substring() fetch one id's slice.
ALTER TABLE queen.segments ALTER COLUMN message_ids SET STORAGE EXTERNAL;
CREATE INDEX segments_created_at ON queen.segments (created_at);
-- Frames are compressed with lz4 where the server supports it: pglz spends
-- far more CPU, mostly on payloads that do not compress.
DO $$
BEGIN
    IF 'lz4' = ANY (SELECT unnest(enumvals) FROM pg_settings WHERE name = 'default_toast_compression') THEN
        ALTER TABLE queen.segments ALTER COLUMN frames SET COMPRESSION lz4;
    END IF;
END
$$;

-- The hash sidecar: one row per segment, one XXH3-128 hash (16 bytes,
-- big-endian) per frame in frame order, packed. Written on every push, dedup
-- on or off; acks and retention read it.
CREATE TABLE queen.log_txns (
    partition_id uuid        NOT NULL,
    first_offset bigint      NOT NULL,
    last_offset  bigint      NOT NULL,
    created_at   timestamptz NOT NULL,
    hashes       bytea       NOT NULL,
    PRIMARY KEY (partition_id, first_offset)
);
CREATE INDEX log_txns_created_at ON queen.log_txns (created_at);

-- The cold probe's index: one row per frame, (partition, hash) -> offset,
-- written by the same statement as its log_txns row and purged with it. A
-- probe is one btree descent per incoming hash (an index-only scan), so its
-- cost follows the number of incoming hashes, not the window's size (measured
-- in persistence/probe_bench_test.go). A hash index was tried: its lookups
-- stay flat as the window grows, but every insert updates its metapage, which
-- serialised concurrent commits under load. The hash is stored as uuid: a
-- fixed 16-byte value compared with memcmp (it is not a UUID).
CREATE TABLE queen.log_txn_hashes (
    partition_id uuid        NOT NULL,
    hash         uuid        NOT NULL,
    "offset"     bigint      NOT NULL,
    -- first_offset of the covering segment: a duplicate's original id is one
    -- primary-key lookup away.
    segment      bigint      NOT NULL,
    created_at   timestamptz NOT NULL
);
CREATE INDEX log_txn_hashes_lookup ON queen.log_txn_hashes (partition_id, hash) INCLUDE ("offset", segment, created_at);
-- Rows arrive in created_at order: a BRIN index lets retention find old rows
-- at almost no cost per insert.
CREATE INDEX log_txn_hashes_created_at ON queen.log_txn_hashes USING brin (created_at);
