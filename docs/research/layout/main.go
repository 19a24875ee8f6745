package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	baseDSN  = flag.String("dsn", "host=127.0.0.1 port=55440 user=postgres sslmode=disable", "dsn without dbname")
	pgData   = flag.String("pgdata", "", "data dir (for postmaster.pid)")
	cand     = flag.String("cand", "A", "A|B|C|D|E")
	fenceMd  = flag.String("fence", "own", "own (row per writer, FOR NO KEY UPDATE) | share (one row, FOR SHARE)")
	shape    = flag.String("shape", "spread", "spread|dense|big")
	writers  = flag.Int("writers", 4, "writer connections")
	warm     = flag.Int("warm", 50000, "warm-up messages")
	measure  = flag.Int("msgs", 500000, "measured messages")
	noCkpt   = flag.Bool("nockpt", false, "no checkpoint in the middle")
	mode     = flag.String("mode", "write", "write|read")
	dbname   = flag.String("db", "", "database name (default cand_shape)")
	outFile  = flag.String("out", "results.jsonl", "append JSON result here")
	walInsp  = flag.Bool("walinspect", true, "per-relation WAL breakdown")
	readPart = flag.Int("readparts", 20, "partitions sampled in read mode")
)

const payloadLen = 200

var bigRand []byte // random payload source

type msg struct {
	id, hash [16]byte
	txn      string
	payload  []byte
}

type run struct {
	pid   [16]byte
	first int64
	msgs  []msg
}

func randBytes16(r *rand.Rand) (b [16]byte) {
	binary.LittleEndian.PutUint64(b[:8], r.Uint64())
	binary.LittleEndian.PutUint64(b[8:], r.Uint64())
	return
}

func appendFrame(dst []byte, txn string, payload []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(txn)))
	dst = append(dst, txn...)
	dst = append(dst, 0)
	dst = binary.AppendUvarint(dst, uint64(len(payload)))
	return append(dst, payload...)
}

type writer struct {
	w      int
	parts  [][16]byte // owned partitions
	next   map[[16]byte]int64
	r      *rand.Rand
	conn   *pgx.Conn
	perCom int
	runsN  int
}

// plan builds one commit's runs, sorted by partition id.
func (wr *writer) plan() []run {
	var runs []run
	mk := func(pid [16]byte, n int) run {
		ms := make([]msg, n)
		for i := range ms {
			off := wr.r.IntN(len(bigRand) - payloadLen)
			ms[i] = msg{id: randBytes16(wr.r), hash: randBytes16(wr.r),
				txn: fmt.Sprintf("txn-%08x", wr.r.Uint32()), payload: bigRand[off : off+payloadLen]}
		}
		return run{pid: pid, msgs: ms}
	}
	switch *shape {
	case "spread": // 350 distinct partitions, one message each
		idx := wr.r.Perm(len(wr.parts))[:350]
		for _, i := range idx {
			runs = append(runs, mk(wr.parts[i], 1))
		}
	case "dense": // 350 messages over the writer's 64 partitions
		per := 350 / len(wr.parts)
		extra := 350 % len(wr.parts)
		perm := wr.r.Perm(len(wr.parts))
		for k, i := range perm {
			n := per
			if k < extra {
				n++
			}
			runs = append(runs, mk(wr.parts[i], n))
		}
	case "big": // 3200 messages over 32 partitions
		for _, p := range wr.parts {
			runs = append(runs, mk(p, 100))
		}
	}
	sort.Slice(runs, func(i, j int) bool { return bytes.Compare(runs[i].pid[:], runs[j].pid[:]) < 0 })
	return runs
}

func (wr *writer) commit(ctx context.Context) (int, error) {
	runs := wr.plan()
	n := 0
	for _, r := range runs {
		n += len(r.msgs)
	}
	switch *cand {
	case "A":
		tx, err := wr.conn.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback(ctx)
		ids := make([][16]byte, len(runs))
		for i, r := range runs {
			ids[i] = r.pid
		}
		rows, err := tx.Query(ctx, lockA, ids)
		if err != nil {
			return 0, err
		}
		last := map[[16]byte]int64{}
		for rows.Next() {
			var id [16]byte
			var lo int64
			if err := rows.Scan(&id, &lo); err != nil {
				return 0, err
			}
			last[id] = lo
		}
		if err := rows.Err(); err != nil {
			return 0, err
		}
		var pids, hp, hh [][16]byte
		var firsts, lasts, ho, hs []int64
		var mids, frs, hss [][]byte
		for i := range runs {
			r := &runs[i]
			r.first = last[r.pid] + 1
			pids = append(pids, r.pid)
			firsts = append(firsts, r.first)
			lasts = append(lasts, r.first+int64(len(r.msgs))-1)
			var m, f, h []byte
			for k, ms := range r.msgs {
				m = append(m, ms.id[:]...)
				h = append(h, ms.hash[:]...)
				f = appendFrame(f, ms.txn, ms.payload)
				hp = append(hp, r.pid)
				hh = append(hh, ms.hash)
				ho = append(ho, r.first+int64(k))
				hs = append(hs, r.first)
			}
			mids, frs, hss = append(mids, m), append(frs, f), append(hss, h)
		}
		if _, err := tx.Exec(ctx, insertA, pids, firsts, lasts, mids, frs, hss, hp, hh, ho, hs); err != nil {
			return 0, err
		}
		return n, tx.Commit(ctx)
	case "B", "C", "E":
		var dir, mids, hss, frs []byte
		var rp, hp, hh [][16]byte
		var rf, rl, ho, hs []int64
		var rpos, rlen, ridx []int32
		idx := 0
		for i := range runs {
			r := &runs[i]
			r.first = wr.next[r.pid]
			wr.next[r.pid] += int64(len(r.msgs))
			pos := len(frs)
			for k, ms := range r.msgs {
				mids = append(mids, ms.id[:]...)
				hss = append(hss, ms.hash[:]...)
				frs = appendFrame(frs, ms.txn, ms.payload)
				hp = append(hp, r.pid)
				hh = append(hh, ms.hash)
				ho = append(ho, r.first+int64(k))
				hs = append(hs, r.first)
			}
			dir = append(dir, r.pid[:]...)
			dir = binary.BigEndian.AppendUint64(dir, uint64(r.first))
			dir = binary.BigEndian.AppendUint32(dir, uint32(len(r.msgs)))
			dir = binary.BigEndian.AppendUint32(dir, uint32(pos))
			rp = append(rp, r.pid)
			rf = append(rf, r.first)
			rl = append(rl, r.first+int64(len(r.msgs))-1)
			rpos = append(rpos, int32(pos))
			rlen = append(rlen, int32(len(frs)-pos))
			ridx = append(ridx, int32(idx))
			idx += len(r.msgs)
		}
		fid := wr.w
		lockClause := "NO KEY UPDATE"
		if *fenceMd == "share" {
			fid, lockClause = 0, "SHARE"
		}
		var cid int64
		var ts time.Time
		err := wr.conn.QueryRow(ctx, fmt.Sprintf(insertBfmt, lockClause), fid, dir, mids, hss, frs,
			rp, rf, rl, rpos, rlen, ridx, hp, hh, ho, hs).Scan(&cid, &ts)
		return n, err
	case "D":
		var pids, hp, hh [][16]byte
		var firsts, lasts, ho, hs []int64
		var mids, frs, hss [][]byte
		for i := range runs {
			r := &runs[i]
			r.first = wr.next[r.pid]
			wr.next[r.pid] += int64(len(r.msgs))
			pids = append(pids, r.pid)
			firsts = append(firsts, r.first)
			lasts = append(lasts, r.first+int64(len(r.msgs))-1)
			var m, f, h []byte
			for k, ms := range r.msgs {
				m = append(m, ms.id[:]...)
				h = append(h, ms.hash[:]...)
				f = appendFrame(f, ms.txn, ms.payload)
				hp = append(hp, r.pid)
				hh = append(hh, ms.hash)
				ho = append(ho, r.first+int64(k))
				hs = append(hs, r.first)
			}
			mids, frs, hss = append(mids, m), append(frs, f), append(hss, h)
		}
		var ts time.Time
		err := wr.conn.QueryRow(ctx, insertD, wr.w, pids, firsts, lasts, mids, hss, frs, hp, hh, ho, hs).Scan(&ts)
		return n, err
	}
	return 0, fmt.Errorf("unknown cand")
}

func connect(ctx context.Context, db string) *pgx.Conn {
	c, err := pgx.Connect(ctx, *baseDSN+" dbname="+db)
	if err != nil {
		log.Fatal(err)
	}
	return c
}

func mustExec(ctx context.Context, c *pgx.Conn, sql string, args ...any) {
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		log.Fatalf("%v\n%s", err, sql)
	}
}

// pgCPU sums utime+stime (clock ticks) of the postmaster and its children.
func pgCPU() (ticks int64, procs int) {
	b, err := os.ReadFile(filepath.Join(*pgData, "postmaster.pid"))
	if err != nil {
		log.Fatal(err)
	}
	pm := strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		s, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		str := string(s)
		i := strings.LastIndexByte(str, ')')
		f := strings.Fields(str[i+2:]) // f[0]=state (field 3)
		ppid := f[1]
		if e.Name() != pm && ppid != pm {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += ut + st
		procs++
	}
	return
}

type snap struct {
	t     time.Time
	lsn   string
	dbsz  int64
	cpu   int64
	msgs  int64
	rels  map[string]int64
	ckpts int64
}

func takeSnap(ctx context.Context, c *pgx.Conn, counter *atomic.Int64) snap {
	var s snap
	s.msgs = counter.Load()
	s.t = time.Now()
	s.cpu, _ = pgCPU()
	if err := c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, pg_database_size(current_database()), (SELECT checkpoints_req+checkpoints_timed FROM pg_stat_bgwriter)`).Scan(&s.lsn, &s.dbsz, &s.ckpts); err != nil {
		log.Fatal(err)
	}
	s.rels = relSizes(ctx, c)
	return s
}

// relSizes: per queen relation (heap main+fsm+vm, toast heap+index, each index).
func relSizes(ctx context.Context, c *pgx.Conn) map[string]int64 {
	rows, err := c.Query(ctx, `
SELECT c.relname || CASE c.relpersistence WHEN 'u' THEN ' (unlogged)' ELSE '' END, pg_table_size(c.oid) - COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid,0)),0) AS heap,
       COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid,0)),0) AS toast
  FROM pg_class c WHERE c.relnamespace = 'queen'::regnamespace AND c.relkind = 'r'
UNION ALL
SELECT 'idx ' || c.relname, pg_relation_size(c.oid), 0 FROM pg_class c WHERE c.relnamespace = 'queen'::regnamespace AND c.relkind = 'i'`)
	if err != nil {
		log.Fatal(err)
	}
	m := map[string]int64{}
	for rows.Next() {
		var n string
		var h, t int64
		if err := rows.Scan(&n, &h, &t); err != nil {
			log.Fatal(err)
		}
		m[n] = h
		if t > 0 {
			m["toast "+n] = t
		}
	}
	return m
}

type walRel struct {
	Label   string  `json:"label"`
	Records int64   `json:"records"`
	Bytes   int64   `json:"bytes"`
	FPI     int64   `json:"fpi"`
	PerMsg  float64 `json:"per_msg"`
	FPIMsg  float64 `json:"fpi_per_msg"`
}

func walBreakdown(ctx context.Context, c *pgx.Conn, from, to string, msgs int64) []walRel {
	rows, err := c.Query(ctx, `
WITH r AS (
  SELECT (regexp_match(block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid AS fn, resource_manager AS rm, record_length, fpi_length
    FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
), g AS (
  SELECT fn, rm, count(*) n, sum(record_length) b, sum(fpi_length) f FROM r GROUP BY 1, 2
)
SELECT COALESCE(
         CASE WHEN c.relnamespace = 'pg_toast'::regnamespace AND c.relkind = 't'
                THEN 'toast(' || (SELECT p.relname FROM pg_class p WHERE p.reltoastrelid = c.oid) || ')'
              WHEN c.relnamespace = 'pg_toast'::regnamespace AND c.relkind = 'i'
                THEN 'toastidx(' || (SELECT p.relname FROM pg_index i JOIN pg_class p ON p.reltoastrelid = i.indrelid WHERE i.indexrelid = c.oid) || ')'
              ELSE c.relname END,
         CASE WHEN g.fn IS NULL THEN '[' || g.rm || ' no block]' ELSE '[' || g.rm || ' other rel ' || g.fn || ']' END) AS label,
       sum(g.n)::bigint, sum(g.b)::bigint, sum(g.f)::bigint
  FROM g LEFT JOIN pg_class c ON c.relfilenode = g.fn AND g.fn <> 0
 GROUP BY 1 ORDER BY 3 DESC`, from, to)
	if err != nil {
		log.Fatal(err)
	}
	var out []walRel
	for rows.Next() {
		var w walRel
		if err := rows.Scan(&w.Label, &w.Records, &w.Bytes, &w.FPI); err != nil {
			log.Fatal(err)
		}
		w.PerMsg = float64(w.Bytes) / float64(msgs)
		w.FPIMsg = float64(w.FPI) / float64(msgs)
		out = append(out, w)
	}
	if rows.Err() != nil {
		log.Fatal(rows.Err())
	}
	return out
}

func lsnDiff(ctx context.Context, c *pgx.Conn, a, b string) int64 {
	var d float64
	if err := c.QueryRow(ctx, `SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)`, a, b).Scan(&d); err != nil {
		log.Fatal(err)
	}
	return int64(d)
}

func main() {
	flag.Parse()
	ctx := context.Background()
	if *dbname == "" {
		*dbname = strings.ToLower(*cand + "_" + *shape)
		if *fenceMd == "share" {
			*dbname += "_share"
		}
	}
	if *mode == "read" {
		readMode(ctx)
		return
	}
	bigRand = make([]byte, 64<<20)
	rr := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(bigRand); i += 8 {
		binary.LittleEndian.PutUint64(bigRand[i:], rr.Uint64())
	}

	admin := connect(ctx, "postgres")
	mustExec(ctx, admin, "DROP DATABASE IF EXISTS "+*dbname)
	mustExec(ctx, admin, "CREATE DATABASE "+*dbname)
	admin.Close(ctx)
	mon := connect(ctx, *dbname)
	mustExec(ctx, mon, commonDDL)
	switch *cand {
	case "A":
		mustExec(ctx, mon, ddlA)
	case "B":
		mustExec(ctx, mon, ddlBcommits+framesExternal+fmt.Sprintf(ddlRunsFmt, "UNLOGGED"))
	case "E":
		mustExec(ctx, mon, ddlBcommits+framesLZ4+fmt.Sprintf(ddlRunsFmt, "UNLOGGED"))
	case "C":
		mustExec(ctx, mon, ddlBcommits+framesExternal+fmt.Sprintf(ddlRunsFmt, ""))
	case "D":
		mustExec(ctx, mon, ddlD)
	}
	nparts := map[string]int{"spread": 10000, "dense": 64 * *writers, "big": 32 * *writers}[*shape]
	pr := rand.New(rand.NewPCG(7, uint64(nparts)))
	all := make([][16]byte, nparts)
	names := make([]string, nparts)
	for i := range all {
		all[i] = randBytes16(pr)
		names[i] = fmt.Sprintf("p%05d", i)
	}
	mustExec(ctx, mon, `INSERT INTO queen.partitions (id, queue_id, name) SELECT u.id, 1, u.n FROM unnest($1::uuid[], $2::text[]) u(id, n)`, all, names)
	mustExec(ctx, mon, `INSERT INTO queen.fence (id) SELECT generate_series(0, $1)`, *writers)
	mustExec(ctx, mon, `VACUUM ANALYZE`)
	mustExec(ctx, mon, `CHECKPOINT`)

	var counter, commits atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, *writers)
	for w := 0; w < *writers; w++ {
		wr := &writer{w: w, next: map[[16]byte]int64{}, r: rand.New(rand.NewPCG(uint64(w)+100, 3)), conn: connect(ctx, *dbname)}
		for i := range all {
			switch *shape {
			case "spread":
				if i%*writers == w {
					wr.parts = append(wr.parts, all[i])
				}
			case "dense":
				if i/64 == w {
					wr.parts = append(wr.parts, all[i])
				}
			case "big":
				if i/32 == w {
					wr.parts = append(wr.parts, all[i])
				}
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				n, err := wr.commit(ctx)
				if err != nil {
					errc <- err
					stop.Store(true)
					return
				}
				counter.Add(int64(n))
				commits.Add(1)
			}
		}()
	}
	waitFor := func(n int64) {
		for counter.Load() < n && !stop.Load() {
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor(int64(*warm))
	c0 := commits.Load()
	s0 := takeSnap(ctx, mon, &counter)
	var ckDur time.Duration
	if !*noCkpt {
		waitFor(s0.msgs + int64(*measure)/2)
		t := time.Now()
		mustExec(ctx, mon, "CHECKPOINT")
		ckDur = time.Since(t)
	}
	waitFor(s0.msgs + int64(*measure))
	s1 := takeSnap(ctx, mon, &counter)
	c1 := commits.Load()
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-errc:
		log.Fatal(err)
	default:
	}
	msgs := s1.msgs - s0.msgs
	wal := lsnDiff(ctx, mon, s0.lsn, s1.lsn)
	res := map[string]any{
		"cand": *cand, "fence": *fenceMd, "shape": *shape, "writers": *writers, "msgs": msgs, "commits": c1 - c0,
		"secs": s1.t.Sub(s0.t).Seconds(), "msgs_per_s": float64(msgs) / s1.t.Sub(s0.t).Seconds(),
		"wal_bytes": wal, "wal_per_msg": float64(wal) / float64(msgs),
		"db_bytes": s1.dbsz - s0.dbsz, "db_per_msg": float64(s1.dbsz-s0.dbsz) / float64(msgs),
		"cpu_us_per_msg":  float64(s1.cpu-s0.cpu) * 10000 / float64(msgs), // 100 ticks/s
		"checkpoint_secs": ckDur.Seconds(), "checkpoints_during": s1.ckpts - s0.ckpts,
	}
	reld := map[string]float64{}
	for k, v := range s1.rels {
		reld[k] = float64(v-s0.rels[k]) / float64(msgs)
	}
	res["db_rel_per_msg"] = reld
	fmt.Printf("%s/%s/%s: %d msgs %.1fs %.0f msg/s WAL %.1f B/msg DB %.1f B/msg CPU %.1f us/msg ckpt %.1fs\n",
		*cand, *fenceMd, *shape, msgs, res["secs"], res["msgs_per_s"], res["wal_per_msg"], res["db_per_msg"], res["cpu_us_per_msg"], ckDur.Seconds())
	keys := make([]string, 0, len(reld))
	for k, v := range reld {
		if v >= 0.5 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return reld[keys[i]] > reld[keys[j]] })
	for _, k := range keys {
		fmt.Printf("   db %-45s %8.1f\n", k, reld[k])
	}
	if *walInsp {
		t := time.Now()
		wb := walBreakdown(ctx, mon, s0.lsn, s1.lsn, msgs)
		res["wal_rel"] = wb
		var fpi, sum int64
		for _, w := range wb {
			fpi += w.FPI
			sum += w.Bytes
			if w.PerMsg >= 0.5 {
				fmt.Printf("   wal %-45s %9d rec %8.1f B/msg (fpi %.1f)\n", w.Label, w.Records, w.PerMsg, w.FPIMsg)
			}
		}
		res["wal_fpi_per_msg"] = float64(fpi) / float64(msgs)
		res["wal_records_per_msg"] = float64(sum) / float64(msgs)
		res["wal_nofpi_per_msg"] = float64(wal-fpi) / float64(msgs)
		fmt.Printf("   wal records sum %.1f B/msg, FPI %.1f B/msg, without FPI %.1f B/msg (walinspect %.0fs)\n",
			float64(sum)/float64(msgs), float64(fpi)/float64(msgs), float64(wal-fpi)/float64(msgs), time.Since(t).Seconds())
	}
	f, _ := os.OpenFile(*outFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0644)
	json.NewEncoder(f).Encode(res)
	f.Close()
}
