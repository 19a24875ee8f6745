-- Consumption (SPEC.md §2, §4): a group's subscription point per queue, its
-- cursor and lease per partition, and dead letters.

-- Where a consumer group starts in each partition of a queue it meets for the
-- first time: from_ts NULL = from the oldest stored message; otherwise the
-- first message stored at or after from_ts. Fixed by the group's first pop of
-- the queue.
CREATE TABLE queen.subscriptions (
    queue_id       bigint      NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    consumer_group text        NOT NULL,
    from_ts        timestamptz,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (queue_id, consumer_group)
);

-- One row per (partition, consumer group). cursor is the last committed
-- offset (-1 before the first commit): everything at or below it is done.
-- A live lease (lease_expires_at > now) gives one consumer the span
-- (cursor, lease_to]; retry_count counts the failures of the message at
-- retry_offset.
CREATE TABLE queen.consumers (
    partition_id     uuid        NOT NULL REFERENCES queen.partitions (id) ON DELETE CASCADE,
    consumer_group   text        NOT NULL,
    queue_id         bigint      NOT NULL,
    "cursor"         bigint      NOT NULL DEFAULT -1,
    lease_id         uuid,
    lease_expires_at timestamptz,
    lease_to         bigint,
    retry_offset     bigint,
    retry_count      integer     NOT NULL DEFAULT 0,
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (partition_id, consumer_group)
);
CREATE INDEX consumers_lease ON queen.consumers (lease_id) WHERE lease_id IS NOT NULL;
CREATE INDEX consumers_group ON queen.consumers (consumer_group);
CREATE INDEX consumers_queue ON queen.consumers (queue_id, consumer_group);

-- Dead letters: a copy of the frame (packed as in segments.frames, one frame)
-- with the error text and how many deliveries failed.
CREATE TABLE queen.dead_letters (
    id             bigserial   PRIMARY KEY,
    queue_id       bigint      NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    partition_id   uuid        NOT NULL,
    consumer_group text        NOT NULL,
    "offset"       bigint      NOT NULL,
    message_id     uuid        NOT NULL,
    frame          bytea       NOT NULL,
    created_at     timestamptz NOT NULL,
    error          text        NOT NULL DEFAULT '',
    attempts       integer     NOT NULL,
    dead_at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX dead_letters_queue ON queen.dead_letters (queue_id, consumer_group, id);
