-- The transaction-id hashes stored at (partition, offset) pairs, for acks
-- that name both an offset and a transactionId (checked against it; one
-- pair or many, from one consumer row or an ack call's many): per element
-- of the parallel arrays $1 (uuid[]) and $2 (bigint[]), its 1-based position and the transaction-id
-- hash stored at that offset of that partition, read from the offset's
-- segment (16 bytes per frame, in frame order). An offset whose segment is
-- gone (retention) or never allocated has no row.
--
-- Each element is one segments_offset descent (per time range) inside a LATERAL
-- subquery keyed by it (ORDER BY first_offset DESC LIMIT 1), never a join
-- of the arrays with a scan of the table.
SELECT u.i, substring(l.hashes FROM ((u.o - l.first_offset) * 16 + 1)::int FOR 16)
  FROM unnest($1::uuid[], $2::bigint[]) WITH ORDINALITY AS u (pid, o, i)
 CROSS JOIN LATERAL (
    SELECT t.first_offset, t.last_offset, t.hashes
      FROM queen.segments t
     WHERE t.partition_id = u.pid AND t.first_offset <= u.o
     ORDER BY t.first_offset DESC
     LIMIT 1
 ) l
 WHERE l.last_offset >= u.o AND l.hashes IS NOT NULL
