package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

// windowSize is the local terminal's size (cols, rows), else 80 x 24.
func windowSize(fd int) (int, int) {
	if w, h, err := term.GetSize(fd); err == nil {
		return w, h
	}
	return 80, 24
}

// localTTY puts the local terminal (fd, when it is one) in raw mode, and calls resize with its
// size (cols, rows) at each SIGWINCH; restore ends both.
func localTTY(fd int, resize func(cols, rows int)) (restore func(), err error) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-winch:
				if w, h, err := term.GetSize(fd); err == nil {
					resize(w, h)
				}
			}
		}
	}()
	stop := func() {
		signal.Stop(winch)
		close(done)
	}
	if !term.IsTerminal(fd) {
		return stop, nil
	}
	old, err := term.MakeRaw(fd)
	if err != nil {
		stop()
		return nil, err
	}
	return func() {
		stop()
		term.Restore(fd, old)
	}, nil
}
