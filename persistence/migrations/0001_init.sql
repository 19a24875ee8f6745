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

-- The hash sidecar: one row per segment, one XXH3-128 hash (16 bytes,
-- big-endian) per frame in frame order. Written on every push, dedup on or off.
CREATE TABLE queen.log_txns (
    partition_id uuid        NOT NULL,
    first_offset bigint      NOT NULL,
    last_offset  bigint      NOT NULL,
    created_at   timestamptz NOT NULL,
    hashes       bytea[]     NOT NULL,
    PRIMARY KEY (partition_id, first_offset)
);
-- The cold probe: an inverted index from each hash to the rows holding it, so a
-- probe's cost follows the number of incoming hashes, not the window's size.
-- fastupdate is off: a pending list would be scanned linearly by every probe.
CREATE INDEX log_txns_hashes ON queen.log_txns USING gin (hashes) WITH (fastupdate = off);
CREATE INDEX log_txns_created_at ON queen.log_txns (created_at);
