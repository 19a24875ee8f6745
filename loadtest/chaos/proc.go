package chaos

import (
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// proc is one child process of a Cluster (a broker or a NATS node), run in
// a process group of its own so that a signal reaches all of it.
type proc struct {
	mu   sync.Mutex
	cmd  *exec.Cmd     // nil until started
	done chan struct{} // closed when cmd has exited
	up   bool          // what up means is the owner's (see brokerProc, natsNode)
}

// down marks p down and returns its command (nil: never started) and the
// channel closed when it exits.
func (p *proc) down() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = false
	return p.cmd, p.done
}

// kill sends SIGKILL to p's process group and waits for it to exit.
func (p *proc) kill() {
	cmd, done := p.down()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// stop ends p: SIGTERM (a clean shutdown; SIGCONT too, so a frozen process
// can handle it), SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	cmd, done := p.down()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}
