package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
)

// readMode: for readparts random partitions, read the last 100 messages
// (ids + frames) through the layout's index and count shared buffers
// (hit + read) with EXPLAIN (ANALYZE, BUFFERS). Run right after a restart
// for the cold numbers.
const readA = `
SELECT count(*), sum(length(md5(s.message_ids))), sum(length(md5(s.frames)))
  FROM queen.segments s
 WHERE s.partition_id = $1 AND s.first_offset BETWEEN $2 AND $3`

const readB = `
SELECT count(*),
       sum(length(md5(substring(c.message_ids FROM r.idx * 16 + 1 FOR (r.last_offset - r.first_offset + 1)::int * 16)))),
       sum(length(md5(substring(c.frames FROM r.pos + 1 FOR r.len))))
  FROM queen.runs r JOIN queen.commits c ON c.id = r.commit_id
 WHERE r.partition_id = $1 AND r.first_offset BETWEEN $2 AND $3`

func readMode(ctx context.Context) {
	c := connect(ctx, *dbname)
	defer c.Close(ctx)
	tbl := "queen.segments"
	q := readA
	if *cand == "B" || *cand == "C" || *cand == "E" {
		tbl, q = "queen.runs", readB
	}
	mustExec(ctx, c, "SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off; SET max_parallel_workers_per_gather = 0")
	// pick partitions (planning/catalog reads happen in this unmeasured query)
	rows, err := c.Query(ctx, `SELECT id FROM queen.partitions ORDER BY md5(id::text) LIMIT $1`, *readPart)
	if err != nil {
		log.Fatal(err)
	}
	var pids [][16]byte
	for rows.Next() {
		var id [16]byte
		rows.Scan(&id)
		pids = append(pids, id)
	}
	var totHit, totRead, totMsgs, totRows int64
	his, los := map[[16]byte]int64{}, map[[16]byte]int64{}
	for _, pid := range pids {
		// bounds (not measured): the first offset of the run holding hi-99
		var hi, lo int64
		if err := c.QueryRow(ctx, fmt.Sprintf(`SELECT max(last_offset) FROM %s WHERE partition_id = $1`, tbl), pid).Scan(&hi); err != nil {
			log.Fatal(err)
		}
		if err := c.QueryRow(ctx, fmt.Sprintf(`SELECT COALESCE(max(first_offset) FILTER (WHERE first_offset <= $2), min(first_offset)) FROM %s WHERE partition_id = $1`, tbl), pid, hi-99).Scan(&lo); err != nil {
			log.Fatal(err)
		}
		his[pid], los[pid] = hi, lo
	}
	c.Close(ctx)
	// cold: restart the server (shared buffers emptied; the OS cache is not)
	if out, err := exec.Command("su", "postgres", "-c", "/usr/lib/postgresql/15/bin/pg_ctl -D "+*pgData+" -m fast -w restart -l "+*pgData+"/../pg.log").CombinedOutput(); err != nil {
		log.Fatalf("%v %s", err, out)
	}
	c = connect(ctx, *dbname)
	mustExec(ctx, c, "SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off; SET max_parallel_workers_per_gather = 0")
	for _, pid := range pids {
		hi, lo := his[pid], los[pid]
		var plan []byte
		if err := c.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+q, pid, lo, hi).Scan(&plan); err != nil {
			log.Fatal(err)
		}
		var p []struct {
			Plan map[string]any `json:"Plan"`
		}
		json.Unmarshal(plan, &p)
		top := p[0].Plan
		hit := int64(top["Shared Hit Blocks"].(float64))
		rd := int64(top["Shared Read Blocks"].(float64))
		// the aggregate's child holds the row count
		child := top["Plans"].([]any)[0].(map[string]any)
		nrows := int64(child["Actual Rows"].(float64))
		totHit += hit
		totRead += rd
		totMsgs += hi - lo + 1
		totRows += nrows
	}
	res := map[string]any{"mode": "read", "db": *dbname, "cand": *cand, "parts": len(pids), "msgs": totMsgs, "rows": totRows,
		"hit": totHit, "read": totRead, "pages_per_msg": float64(totHit+totRead) / float64(totMsgs),
		"read_per_msg": float64(totRead) / float64(totMsgs)}
	fmt.Printf("read %s: %d partitions, %d msgs in %d rows/runs: hit %d read %d -> %.2f pages/msg (%.2f read/msg)\n",
		*dbname, len(pids), totMsgs, totRows, totHit, totRead, res["pages_per_msg"], res["read_per_msg"])
	f, _ := os.OpenFile(*outFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0644)
	json.NewEncoder(f).Encode(res)
	f.Close()
}
