-- Stores a dead letter: partition $1, group $2, offset $3, message id $4,
-- the packed frame $5, its segment's created_at $6, error $7, attempts $8,
-- its segment's producer $9 (NULL: none; migration 0018).
INSERT INTO queen.dead_letters (queue_id, partition_id, consumer_group, "offset", message_id, frame, created_at, error, attempts, producer_sub)
SELECT p.queue_id, $1, $2, $3, $4, $5, $6, $7, $8, $9 FROM queen.partitions p WHERE p.id = $1
