package main

// DDL and commit statements of each candidate layout.

const commonDDL = `
CREATE EXTENSION IF NOT EXISTS pg_walinspect;
CREATE SCHEMA queen;
CREATE TABLE queen.partitions (
    id          uuid        PRIMARY KEY,
    queue_id    bigint      NOT NULL,
    name        text        NOT NULL,
    last_offset bigint      NOT NULL DEFAULT -1,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (queue_id, name)
);
-- level-0 hash sidecar, as migration 0011 (UNLOGGED range, autovacuum off)
CREATE UNLOGGED TABLE queen.log_txn_hashes (
    partition_id uuid        NOT NULL,
    hash         uuid        NOT NULL,
    "offset"     bigint      NOT NULL,
    segment      bigint      NOT NULL,
    created_at   timestamptz NOT NULL
) WITH (autovacuum_enabled = false);
CREATE INDEX log_txn_hashes_lookup ON queen.log_txn_hashes (partition_id, hash) INCLUDE ("offset", segment, created_at);
CREATE TABLE queen.fence (id int PRIMARY KEY, owner text NOT NULL DEFAULT '');
`

// A: today's layout (segments_kept + log_txns + row lock per partition).
const ddlA = `
CREATE TABLE queen.segments (
    partition_id uuid        NOT NULL,
    first_offset bigint      NOT NULL,
    last_offset  bigint      NOT NULL,
    created_at   timestamptz NOT NULL,
    message_ids  bytea       NOT NULL,
    frames       bytea       NOT NULL,
    timed        boolean     NOT NULL DEFAULT false
);
CREATE INDEX segments_offset ON queen.segments (partition_id, first_offset);
ALTER TABLE queen.segments ALTER COLUMN message_ids SET STORAGE EXTERNAL;
ALTER TABLE queen.segments ALTER COLUMN frames SET STORAGE EXTERNAL;
CREATE TABLE queen.log_txns (
    partition_id uuid        NOT NULL,
    first_offset bigint      NOT NULL,
    last_offset  bigint      NOT NULL,
    created_at   timestamptz NOT NULL,
    hashes       bytea       NOT NULL,
    PRIMARY KEY (partition_id, first_offset)
);
CREATE INDEX log_txns_created_at ON queen.log_txns (created_at);
`

const lockA = `SELECT p.id, p.last_offset FROM queen.partitions p WHERE p.id = ANY ($1::uuid[]) ORDER BY p.id FOR NO KEY UPDATE OF p`

const insertA = `
WITH t AS MATERIALIZED (SELECT clock_timestamp() AS now),
seg AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::bytea[], $5::bytea[], $6::bytea[])
        AS u (partition_id, first_offset, last_offset, message_ids, frames, hashes)
),
s AS (
    INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, frames, timed)
    SELECT seg.partition_id, seg.first_offset, seg.last_offset, t.now, seg.message_ids, seg.frames, false
      FROM seg, t
),
l AS (
    INSERT INTO queen.log_txns (partition_id, first_offset, last_offset, created_at, hashes)
    SELECT seg.partition_id, seg.first_offset, seg.last_offset, t.now, seg.hashes FROM seg, t
),
x AS (
    INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
    SELECT u.partition_id, u.hash, u."offset", u.segment, t.now
      FROM unnest($7::uuid[], $8::uuid[], $9::bigint[], $10::bigint[]) AS u (partition_id, hash, "offset", segment), t
)
UPDATE queen.partitions p
   SET last_offset = seg.last_offset
  FROM seg
 WHERE p.id = seg.partition_id
RETURNING (SELECT now FROM t)`

// B / C / E: one commits row per commit + a runs index (UNLOGGED in B/E, logged in C).
const ddlBcommits = `
CREATE TABLE queen.commits (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at  timestamptz NOT NULL,
    dir         bytea       NOT NULL,
    message_ids bytea       NOT NULL,
    hashes      bytea       NOT NULL,
    frames      bytea       NOT NULL
);
ALTER TABLE queen.commits ALTER COLUMN dir SET STORAGE EXTERNAL;
ALTER TABLE queen.commits ALTER COLUMN message_ids SET STORAGE EXTERNAL;
ALTER TABLE queen.commits ALTER COLUMN hashes SET STORAGE EXTERNAL;
`
const framesExternal = `ALTER TABLE queen.commits ALTER COLUMN frames SET STORAGE EXTERNAL;`
const framesLZ4 = `ALTER TABLE queen.commits ALTER COLUMN frames SET COMPRESSION lz4;` // storage stays EXTENDED

const ddlRunsFmt = `
CREATE %s TABLE queen.runs (
    partition_id uuid        NOT NULL,
    first_offset bigint      NOT NULL,
    last_offset  bigint      NOT NULL,
    commit_id    bigint      NOT NULL,
    created_at   timestamptz NOT NULL,
    pos          int         NOT NULL,  -- byte position of the run in commits.frames
    len          int         NOT NULL,  -- byte length of the run in commits.frames
    idx          int         NOT NULL   -- index of the run's first message in the commit
) WITH (autovacuum_enabled = false);
CREATE INDEX runs_offset ON queen.runs (partition_id, first_offset);
`

// $1 fence id; $2 dir, $3 message_ids, $4 hashes, $5 frames (one commit);
// per run: $6 partition, $7 first, $8 last, $9 pos, $10 len, $11 idx;
// per message: $12 partition, $13 hash, $14 offset, $15 run first offset.
const insertBfmt = `
WITH f AS MATERIALIZED (
    SELECT id FROM queen.fence WHERE id = $1 FOR %s
), t AS MATERIALIZED (
    SELECT clock_timestamp() AS now FROM f
), c AS (
    INSERT INTO queen.commits (created_at, dir, message_ids, hashes, frames)
    SELECT t.now, $2, $3, $4, $5 FROM t
    RETURNING id, created_at
), r AS (
    INSERT INTO queen.runs (partition_id, first_offset, last_offset, commit_id, created_at, pos, len, idx)
    SELECT u.p, u.fo, u.lo, c.id, c.created_at, u.pos, u.len, u.idx
      FROM c, unnest($6::uuid[], $7::bigint[], $8::bigint[], $9::int[], $10::int[], $11::int[]) AS u (p, fo, lo, pos, len, idx)
), x AS (
    INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
    SELECT u.p, u.h, u.o, u.s, c.created_at
      FROM c, unnest($12::uuid[], $13::uuid[], $14::bigint[], $15::bigint[]) AS u (p, h, o, s)
)
SELECT id, created_at FROM c`

// D: per-partition segments holding their hashes, no log_txns, fence row.
const ddlD = `
CREATE TABLE queen.segments (
    partition_id uuid        NOT NULL,
    first_offset bigint      NOT NULL,
    last_offset  bigint      NOT NULL,
    created_at   timestamptz NOT NULL,
    message_ids  bytea       NOT NULL,
    hashes       bytea       NOT NULL,
    frames       bytea       NOT NULL
);
CREATE INDEX segments_offset ON queen.segments (partition_id, first_offset);
ALTER TABLE queen.segments ALTER COLUMN message_ids SET STORAGE EXTERNAL;
ALTER TABLE queen.segments ALTER COLUMN frames SET STORAGE EXTERNAL;
`

const insertD = `
WITH f AS MATERIALIZED (
    SELECT id FROM queen.fence WHERE id = $1 FOR NO KEY UPDATE
), t AS MATERIALIZED (
    SELECT clock_timestamp() AS now FROM f
), s AS (
    INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, hashes, frames)
    SELECT u.p, u.fo, u.lo, t.now, u.m, u.h, u.f
      FROM t, unnest($2::uuid[], $3::bigint[], $4::bigint[], $5::bytea[], $6::bytea[], $7::bytea[]) AS u (p, fo, lo, m, h, f)
), x AS (
    INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
    SELECT u.p, u.h, u.o, u.s, t.now
      FROM t, unnest($8::uuid[], $9::uuid[], $10::bigint[], $11::bigint[]) AS u (p, h, o, s)
)
SELECT now FROM t`
