package localpg

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Process inspection helpers. They use /proc (Linux); where /proc is not
// available they answer conservatively.

// pidFile is the parsed content of PGDATA/postmaster.pid.
type pidFile struct {
	pid    int
	port   int
	status string // "starting", "ready", "stopping", ... ("" when absent)
}

// readPidFile parses PGDATA/postmaster.pid; ok is false when the file is
// absent or unreadable.
func readPidFile(pgdata string) (pidFile, bool) {
	b, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return pidFile{}, false
	}
	lines := strings.Split(string(b), "\n")
	var pf pidFile
	if len(lines) > 0 {
		pf.pid, _ = strconv.Atoi(strings.TrimSpace(lines[0]))
	}
	if len(lines) > 3 {
		pf.port, _ = strconv.Atoi(strings.TrimSpace(lines[3]))
	}
	if len(lines) > 7 {
		pf.status = strings.TrimSpace(lines[7])
	}
	return pf, pf.pid > 0
}

// processAlive reports whether pid names a live, non-zombie process.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return procState(pid) != 'Z'
}

// pidExists reports whether kill(pid, 0) finds a process (zombies
// included), which is how PostgreSQL judges its lock file.
func pidExists(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// procState returns the state letter from /proc/<pid>/stat (0 if unknown).
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// "pid (comm) S ..." — comm may contain spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// isPostgresIn reports whether pid is a live postgres process (postmaster or
// backend) whose working folder is pgdata. PostgreSQL processes chdir into
// their data folder, so this tells our own server apart from an unrelated
// process that happens to have the same pid.
func isPostgresIn(pid int, pgdata os.FileInfo) bool {
	if !processAlive(pid) {
		return false
	}
	base := "/proc/" + strconv.Itoa(pid)
	comm, err := os.ReadFile(base + "/comm")
	if err != nil {
		return false
	}
	name := strings.TrimSpace(string(comm))
	if name != "postgres" && name != "postmaster" {
		return false
	}
	cwd, err := os.Stat(base + "/cwd")
	if err != nil {
		return false
	}
	return os.SameFile(cwd, pgdata)
}

// isPostgresPid reports whether pid is a live process that may be a
// postgres server: alive and not a zombie, and named postgres or
// postmaster (or already past the point where its name can be read). Unlike
// isPostgresIn it does not need the working folder, which an exiting
// process gives up before it is gone.
func isPostgresPid(pid int) bool {
	if !processAlive(pid) {
		return false
	}
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return processAlive(pid)
	}
	name := strings.TrimSpace(string(comm))
	return name == "postgres" || name == "postmaster"
}

// postgresProcessesIn lists live postgres processes working in pgdata
// (for example backends orphaned by a killed postmaster). It returns nil
// when /proc cannot be read.
func postgresProcessesIn(pgdata os.FileInfo) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil
	}
	var pids []int
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if isPostgresIn(pid, pgdata) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procAvailable reports whether /proc looks like a Linux procfs.
func procAvailable() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

// tailFile returns up to maxLines last lines of path starting at byte
// offset from (0 = whole file).
func tailFile(path string, from int64, maxLines int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const maxBytes = 64 << 10
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	start := from
	if fi.Size()-start > maxBytes {
		start = fi.Size() - maxBytes
	}
	if start < 0 || start > fi.Size() {
		start = 0
	}
	if _, err := f.Seek(start, 0); err != nil {
		return ""
	}
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxBytes)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > maxLines {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
