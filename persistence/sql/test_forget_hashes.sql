-- Tests only (Store.ForgetHashes): the transaction-id hashes of partition
-- $1's segment starting at $2 are forgotten, as if its sidecar had aged
-- out: the segment's hashes and its level-0 rows go (level 1 keeps what a
-- compaction wrote). Acks by transactionId of its messages then resolve
-- nothing and an offset's ack is not checked against its transactionId.
WITH s AS (
    UPDATE queen.segments SET hashes = NULL
     WHERE partition_num = (SELECT n.num FROM queen.partitions n WHERE n.id = $1) AND first_offset = $2
)
DELETE FROM queen.log_txn_hashes WHERE partition_id = $1 AND segment = $2
