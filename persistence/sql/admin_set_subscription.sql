-- Moves consumer group $1's subscription point to $2 in every queue it is
-- subscribed to (partitions it meets later start there).
UPDATE queen.subscriptions SET from_ts = $2 WHERE consumer_group = $1
