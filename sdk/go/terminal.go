package sandboxd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// This file is the terminal over WebSocket on the REST port: a new login shell
// (GET /v1/terminal) or the terminal of a process spawned with a PTY
// (GET /v1/processes/{id}/terminal), its output replayed from any offset the daemon's ring
// holds and followed until the process exits. Binary frames carry the terminal's bytes both
// ways; text frames are JSON control messages.

const (
	termPiece    = 16 << 10 // bytes per binary frame written (the daemon takes 64 KiB at most)
	termMaxFrame = 1 << 20  // the largest frame taken from the daemon (it sends 16 KiB)
	termMaxSize  = 0xffff   // columns and rows
)

// TerminalOptions say which terminal Client.Terminal opens.
type TerminalOptions struct {
	// Command runs through "sh -lc" in a new terminal; empty: a login shell (bash -l, else
	// sh -l) in the root dir.
	Command string
	// Cols and Rows size a new terminal (default 80 x 24).
	Cols, Rows int
	// PID attaches to the terminal of this spawned process (Spawn with PTY) instead of
	// opening a new one.
	PID int32
	// Offset is where an attach's output begins: any offset the ring holds (0: all of it);
	// nil: the daemon's default, the last 50 lines.
	Offset *uint64
}

// Terminal is a terminal in the sandbox: Read its output (io.EOF once the process exited,
// then Exit tells how), Write keys into it, Resize it. Offset is that of the next byte Read
// returns, where Reconnect resumes (nothing lost or doubled). Read from one goroutine; Write
// and Resize may come from others. Close leaves the process running.
type Terminal struct {
	c    *Client
	done chan struct{}
	wmu  sync.Mutex // one writer at a time on the connection

	mu      sync.Mutex
	conn    *websocket.Conn
	id      int32
	offset  uint64
	exit    *ExitDetail
	gaps    []AttachEvent
	errs    []string
	closed  bool
	pending []byte // the rest of the frame Read is handing out
}

// Terminal opens a terminal: a new one, or with PID the terminal of a spawned process. It
// returns once the daemon has said where the output begins.
func (c *Client) Terminal(ctx context.Context, o TerminalOptions) (*Terminal, error) {
	path, err := o.path()
	if err != nil {
		return nil, err
	}
	t := &Terminal{c: c, done: make(chan struct{})}
	if err := t.open(ctx, path); err != nil {
		return nil, err
	}
	return t, nil
}

func (o TerminalOptions) path() (string, error) {
	if o.PID != 0 {
		if o.Command != "" || o.Cols != 0 || o.Rows != 0 {
			return "", &Error{Code: "INVALID_ARGUMENT", Message: "terminal: an attach (PID) takes no command or size"}
		}
		p := fmt.Sprintf("/v1/processes/%d/terminal", o.PID)
		if o.Offset != nil {
			p += "?offset=" + strconv.FormatUint(*o.Offset, 10)
		}
		return p, nil
	}
	if o.Offset != nil {
		return "", &Error{Code: "INVALID_ARGUMENT", Message: "terminal: Offset needs a PID (a new terminal starts at 0)"}
	}
	cols, rows := o.Cols, o.Rows
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}
	if err := checkSize(cols, rows); err != nil {
		return "", err
	}
	q := url.Values{"cols": {strconv.Itoa(cols)}, "rows": {strconv.Itoa(rows)}}
	if o.Command != "" {
		q.Set("command", o.Command)
	}
	return "/v1/terminal?" + q.Encode(), nil
}

func checkSize(cols, rows int) error {
	if cols < 1 || rows < 1 || cols > termMaxSize || rows > termMaxSize {
		return &Error{Code: "INVALID_ARGUMENT", Message: "terminal: cols and rows must be from 1 to 65535"}
	}
	return nil
}

// wsURL is the WebSocket URL of a route on the REST port.
func (c *Client) wsURL(path string) string {
	if rest, ok := strings.CutPrefix(c.base, "https://"); ok {
		return "wss://" + rest + path
	}
	return "ws://" + strings.TrimPrefix(c.base, "http://") + path
}

// open connects to path and reads up to the daemon's first message, which says where the
// output begins.
func (t *Terminal) open(ctx context.Context, path string) error {
	d := websocket.Dialer{HandshakeTimeout: t.c.timeout, ReadBufferSize: 32 << 10, WriteBufferSize: 32 << 10,
		TLSClientConfig: t.c.tls}
	h := t.c.httpRoute.Clone()
	if h == nil {
		h = http.Header{}
	}
	if t.c.token != "" {
		h.Set("Authorization", "Bearer "+t.c.token)
	}
	conn, resp, err := d.DialContext(ctx, t.c.wsURL(path), h)
	if err != nil {
		return dialError(path, resp, err)
	}
	conn.SetReadLimit(termMaxFrame)
	conn.SetReadDeadline(time.Now().Add(t.c.timeout))
	for {
		typ, msg, err := conn.ReadMessage()
		if err != nil {
			conn.Close()
			return &Error{Code: "UNAVAILABLE", Message: fmt.Sprintf("terminal %s: not attached: %v", path, err)}
		}
		if typ != websocket.TextMessage {
			conn.Close()
			return &Error{Code: "INTERNAL", Message: "terminal: output came before the attached message"}
		}
		var m struct {
			Type   string `json:"type"`
			ID     int32  `json:"id"`
			Offset uint64 `json:"offset"`
		}
		if json.Unmarshal(msg, &m) == nil && m.Type == "attached" {
			conn.SetReadDeadline(time.Time{})
			t.mu.Lock()
			t.conn, t.id, t.offset, t.pending, t.closed = conn, m.ID, m.Offset, nil, false
			t.mu.Unlock()
			return nil
		}
		if err := t.control(msg); err != nil {
			conn.Close()
			return err
		}
	}
}

// dialError is the daemon's refusal (its status and JSON body), or why it was not reached.
func dialError(path string, resp *http.Response, err error) error {
	if resp != nil && errors.Is(err, websocket.ErrBadHandshake) {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return httpError(resp.StatusCode, body)
	}
	return transportError("terminal "+strings.SplitN(path, "?", 2)[0], err)
}

// control takes a control message's news.
func (t *Terminal) control(msg []byte) error {
	var m struct {
		Type     string `json:"type"`
		From     uint64 `json:"from"`
		To       uint64 `json:"to"`
		ExitCode int    `json:"exit_code"`
		Signal   int    `json:"signal"`
		Reason   string `json:"reason"`
		Message  string `json:"message"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		return &Error{Code: "INTERNAL", Message: fmt.Sprintf("terminal: a bad control message: %q", msg)}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch m.Type {
	case "truncated":
		// Output [From, To) left the ring before this client got it: said, never silent.
		t.gaps = append(t.gaps, AttachEvent{Stream: StreamStdout, Truncated: true, From: m.From, To: m.To})
		t.offset = m.To
	case "exit":
		if m.Reason == "oom" {
			m.Reason = "oom_killed" // the name sandboxd.v1.Processes gives it
		}
		if t.exit == nil {
			t.exit = &ExitDetail{Code: m.ExitCode, Signal: m.Signal, Reason: m.Reason}
			close(t.done)
		}
	case "error":
		t.errs = append(t.errs, m.Message)
	}
	return nil
}

// ID is the process's id (sandboxd.v1.Processes: Client.Process(id) reaches it).
func (t *Terminal) ID() int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.id
}

// Offset is the offset of the next byte Read returns.
func (t *Terminal) Offset() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.offset
}

// Exit is how the process ended, once Read has reached its exit; else nil.
func (t *Terminal) Exit() *ExitDetail {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exit
}

// Done is closed once Read has reached the process's exit.
func (t *Terminal) Done() <-chan struct{} { return t.done }

// Truncated are the gaps seen: output gone from the daemon's ring before it was read.
func (t *Terminal) Truncated() []AttachEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]AttachEvent(nil), t.gaps...)
}

// Errors are the daemon's answers to control messages it could not act on (a resize it
// refused).
func (t *Terminal) Errors() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.errs...)
}

// Read reads the terminal's output; io.EOF once the process has exited. A lost connection
// is ErrUnavailable, and Reconnect resumes at Offset.
func (t *Terminal) Read(p []byte) (int, error) {
	for len(t.pending) == 0 {
		if t.Exit() != nil {
			return 0, io.EOF
		}
		conn, err := t.current()
		if err != nil {
			return 0, err
		}
		typ, msg, err := conn.ReadMessage()
		if err != nil {
			return 0, t.lost(err)
		}
		if typ == websocket.BinaryMessage {
			t.pending = msg
		} else if err := t.control(msg); err != nil {
			return 0, err
		}
	}
	n := copy(p, t.pending)
	t.pending = t.pending[n:]
	t.mu.Lock()
	t.offset += uint64(n)
	t.mu.Unlock()
	return n, nil
}

func (t *Terminal) current() (*websocket.Conn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.conn == nil {
		return nil, &Error{Code: "CANCELLED", Message: "the terminal is closed"}
	}
	return t.conn, nil
}

// lost is the error of a connection that ended before the exit.
func (t *Terminal) lost(err error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return &Error{Code: "CANCELLED", Message: "the terminal is closed"}
	}
	return &Error{Code: "UNAVAILABLE", Message: fmt.Sprintf(
		"terminal %d: the connection ended at offset %d before the process exited (%v); Reconnect resumes there",
		t.id, t.offset, err)}
}

// Write types b into the terminal.
func (t *Terminal) Write(b []byte) (int, error) {
	conn, err := t.current()
	if err != nil {
		return 0, err
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	done := 0
	for done < len(b) {
		n := min(len(b)-done, termPiece)
		if err := conn.WriteMessage(websocket.BinaryMessage, b[done:done+n]); err != nil {
			return done, t.lost(err)
		}
		done += n
	}
	return done, nil
}

// Resize sets the terminal's size (the process gets SIGWINCH).
func (t *Terminal) Resize(cols, rows int) error {
	if err := checkSize(cols, rows); err != nil {
		return err
	}
	conn, err := t.current()
	if err != nil {
		return err
	}
	msg, _ := json.Marshal(map[string]any{"type": "resize", "cols": cols, "rows": rows})
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
		return t.lost(err)
	}
	return nil
}

// Reconnect closes the connection and opens a new one to the same process, its output
// resumed at Offset: nothing read comes again, nothing unread is skipped (a gap the ring lost
// is in Truncated). Not while a Read is under way.
func (t *Terminal) Reconnect(ctx context.Context) error {
	t.Close()
	t.mu.Lock()
	path := fmt.Sprintf("/v1/processes/%d/terminal?offset=%d", t.id, t.offset)
	t.mu.Unlock()
	return t.open(ctx, path)
}

// Close closes the connection; the process goes on (Reconnect, or Terminal with its PID,
// finds it again).
func (t *Terminal) Close() error {
	t.mu.Lock()
	conn := t.conn
	t.closed, t.conn = true, nil
	t.mu.Unlock()
	if conn == nil {
		return nil
	}
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	return conn.Close()
}
