package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// proc is one server process this package started. It is serialised into state.json so that
// another process can stop it.
type proc struct {
	PID  int      `json:"pid"`
	Bin  string   `json:"bin"`
	Log  string   `json:"log"`
	Args []string `json:"args"`

	cmd  *exec.Cmd // nil when the proc was loaded from state.json
	done chan struct{}
}

// startProc starts bin with args, output appended to logPath. With detach the child gets its own
// session and outlives this process (the CLI's `up`); otherwise it is killed if this process dies
// (Pdeathsig), so that a crashed test leaves no server behind.
func startProc(bin string, args []string, logPath string, detach bool) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	p := &proc{PID: cmd.Process.Pid, Bin: bin, Log: logPath, Args: args, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// alive reports whether the PID still runs the binary this proc started. A PID that was reused
// by another program counts as not alive, so stop never signals a stranger.
func (p *proc) alive() bool {
	if p == nil || p.PID <= 0 {
		return false
	}
	if p.done != nil {
		// Our own child: Wait tells the truth. (Its /proc cmdline can still show this process's
		// between fork and exec, so it must not be consulted.)
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
	if err != nil || len(cmdline) == 0 {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/stat")
	if err == nil {
		// Field 3 is the state; a zombie (Z) has exited but not been reaped.
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return false
		}
	}
	exe := bytes.SplitN(cmdline, []byte{0}, 2)[0]
	return string(exe) == p.Bin
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs and waits for the exit.
func (p *proc) stop(grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	if p.wait(grace) {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	if p.wait(10 * time.Second) {
		return nil
	}
	return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", filepath.Base(p.Bin), p.PID)
}

// kill sends SIGKILL at once, as a crash would.
func (p *proc) kill() error {
	if !p.alive() {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	if p.wait(10 * time.Second) {
		return nil
	}
	return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", filepath.Base(p.Bin), p.PID)
}

func (p *proc) wait(d time.Duration) bool {
	if p.done != nil {
		select {
		case <-p.done:
			return true
		case <-time.After(d):
			return false
		}
	}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !p.alive() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return !p.alive()
}

// exitedEarly returns an error with the log's tail when the process has already exited.
func (p *proc) exitedEarly() error {
	if p.alive() {
		return nil
	}
	return fmt.Errorf("%s exited: %s", filepath.Base(p.Bin), tail(p.Log, 2000))
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.TrimSpace(b))
}

var errNoFleet = errors.New("no fleet in this directory")
