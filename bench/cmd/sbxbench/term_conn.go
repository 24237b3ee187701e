package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The program on every terminal, by absolute path so that no daemon looks it up in PATH.
const catPath = "/bin/cat"

// callWait bounds each unary call and each setup step.
const callWait = 30 * time.Second

// outBuf is how many arrivals a reader may queue; expect drains them as they come.
const outBuf = 4096

// reader runs read until it fails, sending what it returns, stamped; once, the failure
// (unless stopping says the failure is the close's) and then the end of the channel.
func reader(ch chan<- arrival, stopping func() bool, read func() ([]byte, error)) {
	defer close(ch)
	for {
		b, err := read()
		t := time.Now()
		if err != nil {
			if !stopping() {
				ch <- arrival{err: err}
			}
			return
		}
		if len(b) > 0 {
			ch <- arrival{t: t, b: b}
		}
	}
}

// drain empties ch until its reader closes it, bounded by callWait.
func drain(ch <-chan arrival) {
	t := time.NewTimer(callWait)
	defer t.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-t.C:
			return
		}
	}
}

// --- the floor: a pty of our own, /dev/ptmx and `cat` on its other side ------------------------

type ptyConn struct {
	master   int
	cmd      *exec.Cmd
	ch       chan arrival
	once     sync.Once
	stopping atomic.Bool
}

func openPTY() (termConn, error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("/dev/ptmx: %w", err)
	}
	p := &ptyConn{master: m, ch: make(chan arrival, outBuf)}
	slave, err := p.slave()
	if err != nil {
		unix.Close(m)
		return nil, err
	}
	// cat on the slave as its controlling terminal, the line discipline in its default (cooked)
	// mode: ICANON, ECHO, ONLCR.
	p.cmd = exec.Command(catPath)
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = slave, slave, slave
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = p.cmd.Start()
	slave.Close()
	if err != nil {
		unix.Close(m)
		return nil, err
	}
	// A blocking read on a thread of its own: the kernel wakes this thread itself, with no
	// poller in between (the floor is the line discipline's echo, nothing else).
	go func() {
		runtime.LockOSThread()
		buf := make([]byte, 4096)
		reader(p.ch, p.stopping.Load, func() ([]byte, error) {
			for {
				n, err := unix.Read(m, buf)
				if err == unix.EINTR {
					continue
				}
				if err == nil && n == 0 {
					err = io.EOF
				}
				if err != nil {
					return nil, err
				}
				return append([]byte(nil), buf[:n]...), nil
			}
		})
	}()
	return p, nil
}

func (p *ptyConn) slave() (*os.File, error) {
	if err := unix.IoctlSetPointerInt(p.master, unix.TIOCSPTLCK, 0); err != nil {
		return nil, fmt.Errorf("unlockpt: %w", err)
	}
	n, err := unix.IoctlGetInt(p.master, unix.TIOCGPTN)
	if err != nil {
		return nil, fmt.Errorf("ptsname: %w", err)
	}
	if err := unix.IoctlSetWinsize(p.master, unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 80}); err != nil {
		return nil, fmt.Errorf("TIOCSWINSZ: %w", err)
	}
	return os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
}

func (p *ptyConn) send(b []byte) error {
	_, err := unix.Write(p.master, b)
	return err
}

func (p *ptyConn) out() <-chan arrival { return p.ch }

// close kills cat; the master then reads EIO, which ends the reader.
func (p *ptyConn) close() error {
	p.once.Do(func() {
		p.stopping.Store(true)
		p.cmd.Process.Kill()
		p.cmd.Wait()
		drain(p.ch)
		unix.Close(p.master)
	})
	return nil
}
