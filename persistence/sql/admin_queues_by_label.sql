-- The queues labelled namespace $1 and task $2 ('' = any), by name.
SELECT name FROM queen.queues
WHERE ($1 = '' OR namespace = $1) AND ($2 = '' OR task = $2)
ORDER BY name
LIMIT 1000
