package main

// The REST benchmarks: 1 GiB upload (PUT) and download (GET) against each daemon and against the
// local floors, and small GETs per second (wrk, or a Go keep-alive client when wrk is missing).
//
// The HTTP client for the large transfers is a plain TCP connection with the request written by
// hand and the response parsed by net/http: no client library buffering between the 1 MiB source
// buffer and write(2), or between read(2) and the 1 MiB sink buffer, the same for both daemons
// and the floors.

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const restBufSize = 1 << 20

// sourceBuf is the upload source: 1 MiB of pseudo-random bytes (fixed seed), sent over and over.
// Generated in memory so that reading a source is not part of any measurement; the floor writes
// the same buffer.
func sourceBuf() []byte {
	b := make([]byte, restBufSize)
	rand.New(rand.NewSource(1)).Read(b)
	return b
}

// recyclePages writes n bytes to a scratch file in dir and unlinks it again (no fsync: the dirty
// pages are dropped, nothing reaches the disk), just before a timed upload, so that the page
// cache the upload fills is drawn from page-cache folios freed a moment ago. On a VM with free
// page reporting (virtio-balloon REPORTING, as the project's Firecracker VM has) memory that
// stayed free for a while has been handed back to the host, and the first touch of each page
// costs a host fault: copy_folio_from_iter_atomic then took 1-1.5 s more CPU per GiB for whichever
// writer drew such pages, which made the first writer of a round look up to 3× slower than the
// next. Touching anonymous memory instead does not help: the page cache's large folios come
// from elsewhere.
func recyclePages(dir string, n int64) error {
	if dir == "" || n <= 0 {
		return nil
	}
	f, err := os.CreateTemp(dir, ".sbxbench-recycle-")
	if err != nil {
		return err
	}
	os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, restBufSize)
	for left := n; left > 0; left -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			return err
		}
	}
	return nil
}

// checkFile verifies that path holds n bytes of the repeated source buffer: its size, its first
// MiB and its last whole MiB (a truncated, shifted or zero-filled upload fails).
func checkFile(path string, n int64, src []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != n {
		return fmt.Errorf("%s: %d bytes, want %d", path, st.Size(), n)
	}
	buf := make([]byte, len(src))
	for _, off := range []int64{0, (n/int64(len(src)) - 1) * int64(len(src))} {
		if off < 0 {
			continue
		}
		k, err := f.ReadAt(buf, off)
		if err != nil && !(err == io.EOF && int64(k) == n-off) {
			return err
		}
		if !bytes.Equal(buf[:k], src[:k]) {
			return fmt.Errorf("%s: content differs from the source in the MiB at offset %d", path, off)
		}
	}
	return nil
}

// cmdRestPut: PUT -bytes of the repeated source buffer to -url; time from the first byte of the
// request to the end of the response's header (the daemons answer after fsync and rename).
func cmdRestPut(args []string) error {
	fs := flag.NewFlagSet("restput", flag.ExitOnError)
	url := fs.String("url", "", "http://host:port/v1/files/NAME")
	label := fs.String("label", "", "name of the daemon in the report")
	n := fs.Int64("bytes", 1<<30, "body size")
	pid := fs.Int("pid", 0, "daemon pid, for its CPU time and context switches")
	check := fs.String("check", "", "after the upload, verify size and content of this local file (the target in the daemon's root)")
	recycle := fs.String("recycle", "", "before the timed upload, write bytes+12.5% to a scratch file in this directory and drop it (see recyclePages)")
	out := fs.String("out", "", "append the JSON record to this file")
	fs.Parse(args)
	src := sourceBuf()
	addr, path, err := splitURL(*url)
	if err != nil {
		return err
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	br := bufio.NewReaderSize(conn, 64<<10)
	if err := recyclePages(*recycle, *n+*n/8); err != nil {
		return err
	}
	hdr := fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", path, addr, httpHeaderLines(), *n)

	cpu0, dcpu0, csw0 := selfCPU(), procCPU(*pid), procCtxSwitches(*pid)
	t0 := time.Now()
	var werr error
	if _, werr = io.WriteString(conn, hdr); werr == nil {
		for left := *n; left > 0; {
			k := min(left, int64(len(src)))
			if _, werr = conn.Write(src[:k]); werr != nil {
				break
			}
			left -= k
		}
	}
	tBody := time.Now()
	resp, rerr := http.ReadResponse(br, &http.Request{Method: "PUT"})
	el := time.Since(t0)
	tail := time.Since(tBody) // the last body byte handed to the kernel → the answer: mostly the daemon's fsync
	cpu1, dcpu1, csw1 := selfCPU(), procCPU(*pid), procCtxSwitches(*pid)
	if rerr != nil {
		return fmt.Errorf("response: %v (write: %v)", rerr, werr)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 || werr != nil {
		return fmt.Errorf("status %d %q (write: %v)", resp.StatusCode, body, werr)
	}
	verified := *check == ""
	if *check != "" {
		if err := checkFile(*check, *n, src); err != nil {
			return err
		}
		verified = true
	}
	rec := xferRecord("rest_put", *label, *n, *n, el, cpu1-cpu0, dcpu0, dcpu1, csw0, csw1)
	rec["status"] = resp.StatusCode
	rec["tail_s"] = round(tail.Seconds(), 4)
	rec["verified"] = verified && *check != ""
	return emitXfer(*out, rec)
}

// cmdRestGet: GET -url, reading the body into a 1 MiB buffer and discarding it; time from the
// first byte of the request to the last byte of the body.
func cmdRestGet(args []string) error {
	fs := flag.NewFlagSet("restget", flag.ExitOnError)
	url := fs.String("url", "", "http://host:port/v1/files/NAME")
	label := fs.String("label", "", "name of the daemon in the report")
	n := fs.Int64("bytes", -1, "expected body size (-1: whatever Content-Length says)")
	pid := fs.Int("pid", 0, "daemon pid, for its CPU time and context switches")
	out := fs.String("out", "", "append the JSON record to this file")
	fs.Parse(args)
	addr, path, err := splitURL(*url)
	if err != nil {
		return err
	}
	rec, err := timedGet(addr, path, *label, *n, *pid)
	if err != nil {
		return err
	}
	rec["kind"] = "rest_get"
	return emitXfer(*out, rec)
}

// timedGet sends one GET on a fresh connection and reads the body into a 1 MiB buffer.
func timedGet(addr, path, label string, want int64, pid int) (map[string]any, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	br := bufio.NewReaderSize(conn, 64<<10)
	buf := make([]byte, restBufSize)
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", path, addr, httpHeaderLines())

	cpu0, dcpu0, csw0 := selfCPU(), procCPU(pid), procCtxSwitches(pid)
	t0 := time.Now()
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("status %d %q", resp.StatusCode, b)
	}
	var got int64
	for {
		k, err := resp.Body.Read(buf) // a LimitedReader on br: reads straight into buf once br is empty
		got += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("after %d bytes: %w", got, err)
		}
	}
	el := time.Since(t0)
	cpu1, dcpu1, csw1 := selfCPU(), procCPU(pid), procCtxSwitches(pid)
	if want < 0 {
		want = resp.ContentLength
	}
	rec := xferRecord("", label, got, want, el, cpu1-cpu0, dcpu0, dcpu1, csw0, csw1)
	if got != want {
		emitXfer("/dev/null", rec)
		return nil, fmt.Errorf("received %d bytes, want %d", got, want)
	}
	return rec, nil
}

func xferRecord(kind, label string, got, want int64, el time.Duration, clientCPU, dcpu0, dcpu1 float64, csw0, csw1 int64) map[string]any {
	rec := map[string]any{
		"kind":       kind,
		"label":      label,
		"bytes":      got,
		"want_bytes": want,
		"verified":   got == want,
		"seconds":    round(el.Seconds(), 4),
		"mb_per_s":   round(float64(got)/el.Seconds()/1e6, 1),
		"client_cpu": round(clientCPU, 3),
	}
	if dcpu0 >= 0 && dcpu1 >= 0 {
		rec["daemon_cpu"] = round(dcpu1-dcpu0, 3)
		rec["daemon_cpu_s_per_gib"] = round((dcpu1-dcpu0)*float64(1<<30)/float64(max(got, 1)), 3)
	}
	if csw0 >= 0 && csw1 >= 0 {
		rec["daemon_csw_per_mib"] = round(float64(csw1-csw0)*float64(1<<20)/float64(max(got, 1)), 2)
	}
	return rec
}

func emitXfer(out string, rec map[string]any) error {
	d := ""
	if t, ok := rec["tail_s"].(float64); ok {
		d += fmt.Sprintf("  last byte to answer %.2fs", t)
	}
	if rec["daemon_cpu"] != nil {
		who := "daemon"
		if rec["label"] == "local" {
			who = "sendfile side"
		}
		d += fmt.Sprintf("  %s cpu %v s (%v s/GiB, %v cs/MiB)", who, rec["daemon_cpu"], rec["daemon_cpu_s_per_gib"], rec["daemon_csw_per_mib"])
	}
	fmt.Fprintf(os.Stderr, "  %-9s %-6s %9.1f MB/s  %d bytes in %.2fs  verified=%v  client cpu %.2fs%s\n",
		rec["kind"], rec["label"], rec["mb_per_s"], rec["bytes"], rec["seconds"], rec["verified"], rec["client_cpu"], d)
	return emit(out, rec)
}

// cmdFloorPut: the upload floor, what `dd if=SRC of=FILE bs=1M conv=fsync` does with SRC in
// memory: create FILE in -dir (the daemons' filesystem), write the same 1 MiB source buffer -bytes
// worth, fsync, close and rename over the final name (as the daemons do).
func cmdFloorPut(args []string) error {
	fs := flag.NewFlagSet("floorput", flag.ExitOnError)
	dir := fs.String("dir", "", "directory on the daemons' filesystem")
	name := fs.String("name", "floor-up.bin", "file name in -dir")
	n := fs.Int64("bytes", 1<<30, "bytes to write")
	recycle := fs.Bool("recycle", true, "before the timed write, write bytes+12.5% to a scratch file in -dir and drop it (see recyclePages)")
	out := fs.String("out", "", "append the JSON record to this file")
	fs.Parse(args)
	src := sourceBuf()
	final := filepath.Join(*dir, *name)
	tmp := final + ".tmp"
	os.Remove(tmp)
	if *recycle {
		if err := recyclePages(*dir, *n+*n/8); err != nil {
			return err
		}
	}
	cpu0 := selfCPU()
	t0 := time.Now()
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	for left := *n; left > 0; {
		k := min(left, int64(len(src)))
		if _, err := f.Write(src[:k]); err != nil {
			f.Close()
			return err
		}
		left -= k
	}
	tSync := time.Now()
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	el := time.Since(t0)
	cpu1 := selfCPU()
	if err := checkFile(final, *n, src); err != nil {
		return err
	}
	rec := xferRecord("floor_put", "local", *n, *n, el, cpu1-cpu0, -1, -1, -1, -1)
	rec["tail_s"] = round(el.Seconds()-tSync.Sub(t0).Seconds(), 4) // fsync, close, rename
	return emitXfer(*out, rec)
}

// cmdFloorGet: the download floor: a child process (this program, floorget -serve) listens on a
// loopback port, answers one GET with a minimal HTTP header and then sends the file with a raw
// sendfile(2) loop on a blocking socket; this process reads it with the same client code as
// restget.
func cmdFloorGet(args []string) error {
	fs := flag.NewFlagSet("floorget", flag.ExitOnError)
	file := fs.String("file", "", "the file to send (read once before, so it is in the page cache)")
	serve := fs.Bool("serve", false, "(internal) be the sendfile side: print the port, serve one GET")
	out := fs.String("out", "", "append the JSON record to this file")
	fs.Parse(args)
	if *serve {
		return sendfileServe(*file)
	}
	st, err := os.Stat(*file)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.Command(self, "floorget", "-serve", "-file", *file)
	child.Stderr = os.Stderr
	pout, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	if err := child.Start(); err != nil {
		return err
	}
	defer child.Process.Kill()
	var port int
	if _, err := fmt.Fscan(pout, &port); err != nil {
		return fmt.Errorf("sendfile side: no port: %w", err)
	}
	rec, err := timedGet(fmt.Sprintf("127.0.0.1:%d", port), "/floor", "local", st.Size(), child.Process.Pid)
	if err != nil {
		return err
	}
	if err := child.Wait(); err != nil {
		return fmt.Errorf("sendfile side: %w", err)
	}
	rec["kind"] = "floor_get"
	return emitXfer(*out, rec)
}

func sendfileServe(path string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(l.Addr().(*net.TCPAddr).Port)
	c, err := l.Accept()
	if err != nil {
		return err
	}
	l.Close()
	defer c.Close()
	if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	sf, err := c.(*net.TCPConn).File() // a blocking duplicate of the socket
	if err != nil {
		return err
	}
	defer sf.Close()
	sock, in := int(sf.Fd()), int(f.Fd())
	hdr := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", st.Size())
	if _, err := syscall.Write(sock, []byte(hdr)); err != nil {
		return err
	}
	var off int64
	for off < st.Size() {
		k, err := syscall.Sendfile(sock, in, &off, int(min(st.Size()-off, 1<<30)))
		if err == syscall.EINTR || err == syscall.EAGAIN {
			continue
		}
		if err != nil {
			return err
		}
		if k == 0 {
			return fmt.Errorf("sendfile: 0 bytes at offset %d", off)
		}
	}
	return nil
}

func splitURL(u string) (addr, path string, err error) {
	rest, ok := strings.CutPrefix(u, "http://")
	if !ok {
		return "", "", fmt.Errorf("%q: only http:// URLs", u)
	}
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return rest, "/", nil
	}
	return rest[:i], rest[i:], nil
}
