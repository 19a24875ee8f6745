-- The created_at of partition $1's newest segment (windowBuffer, SPEC.md §6).
SELECT created_at FROM queen.segments WHERE partition_id = $1 ORDER BY first_offset DESC LIMIT 1
