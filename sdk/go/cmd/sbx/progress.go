package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// bar draws a one-line progress bar on w, at most 10 times a second, and a final line.
type bar struct {
	w     io.Writer
	label string
	start time.Time
	mu    sync.Mutex
	last  time.Time
	done  int64
	total int64
}

func newBar(w io.Writer, label string) *bar {
	return &bar{w: w, label: label, start: time.Now(), total: -1}
}

func human(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f %s", n, units[i])
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}

// update is a sandboxd.Progress.
func (b *bar) update(done, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done, b.total = done, total
	if now := time.Now(); now.Sub(b.last) >= 100*time.Millisecond {
		b.last = now
		b.draw()
	}
}

func (b *bar) draw() {
	secs := time.Since(b.start).Seconds()
	rate := ""
	if secs > 0 {
		rate = human(float64(b.done)/secs) + "/s"
	}
	if b.total > 0 {
		frac := float64(b.done) / float64(b.total)
		n := int(frac * 30)
		fmt.Fprintf(b.w, "\r%s [%s%s] %3.0f%% %s / %s %s\x1b[K", b.label, strings.Repeat("#", n),
			strings.Repeat(".", 30-n), frac*100, human(float64(b.done)), human(float64(b.total)), rate)
		return
	}
	fmt.Fprintf(b.w, "\r%s %s %s\x1b[K", b.label, human(float64(b.done)), rate)
}

// finish draws the final state and ends the line.
func (b *bar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.total > 0 {
		b.done = b.total
	}
	b.draw()
	fmt.Fprintln(b.w)
}
