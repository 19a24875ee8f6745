-- Stores a dead letter: partition $1, group $2, offset $3, message id $4,
-- the packed frame $5, its segment's created_at $6, error $7, attempts $8.
INSERT INTO queen.dead_letters (queue_id, partition_id, consumer_group, "offset", message_id, frame, created_at, error, attempts)
SELECT p.queue_id, $1, $2, $3, $4, $5, $6, $7, $8 FROM queen.partitions p WHERE p.id = $1
