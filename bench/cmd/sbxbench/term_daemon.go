package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	pb "sigs.k8s.io/agent-sandbox/packages/sandboxd/spec/process/v1"
)

// --- ours over WebSocket: Spawn a pty process, attach with /v1/processes/{id}/terminal ---------

type wsConn struct {
	procs    *procsClient
	id       int32
	ws       *websocket.Conn
	ch       chan arrival
	once     sync.Once
	stopping atomic.Bool
}

func openWS(addr, base string) (termConn, error) {
	pc, id, err := spawnCat(addr)
	if err != nil {
		return nil, err
	}
	u := "ws://" + strings.TrimPrefix(base, "http://") + fmt.Sprintf("/v1/processes/%d/terminal?offset=0", id)
	d := websocket.Dialer{HandshakeTimeout: callWait}
	ws, _, err := d.Dial(u, nil)
	if err != nil {
		pc.end(id)
		pc.cc.Close()
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	c := &wsConn{procs: pc, id: id, ws: ws, ch: make(chan arrival, outBuf)}
	go reader(c.ch, c.stopping.Load, c.read)
	return c, nil
}

// read returns the next binary frame's bytes; "attached" is skipped, any other control message
// ("exit", "error", "truncated") is a failure here.
func (c *wsConn) read() ([]byte, error) {
	for {
		mt, b, err := c.ws.ReadMessage()
		if err != nil {
			return nil, err
		}
		if mt == websocket.BinaryMessage {
			return b, nil
		}
		var m struct{ Type string }
		if json.Unmarshal(b, &m) != nil || m.Type != "attached" {
			return nil, fmt.Errorf("control message %s", b)
		}
	}
}

func (c *wsConn) send(b []byte) error { return c.ws.WriteMessage(websocket.BinaryMessage, b) }

func (c *wsConn) out() <-chan arrival { return c.ch }

func (c *wsConn) close() error {
	var err error
	c.once.Do(func() {
		c.stopping.Store(true)
		c.ws.Close()
		drain(c.ch)
		err = c.procs.end(c.id)
		c.procs.cc.Close()
	})
	return err
}

// --- gRPC, process.v1 (both daemons): Start with a pty, WriteStdin unary calls ------------------

type startConn struct {
	cc       *grpc.ClientConn
	c        pb.ProcessServiceClient
	cancel   context.CancelFunc
	id       int32
	ch       chan arrival
	once     sync.Once
	stopping atomic.Bool
}

func openStart(addr string) (termConn, error) {
	cc, err := dial(addr, 0)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &startConn{cc: cc, c: pb.NewProcessServiceClient(cc), cancel: cancel, ch: make(chan arrival, outBuf)}
	st, err := s.c.Start(ctx, &pb.StartRequest{
		Config: &pb.ProcessConfig{Command: []string{catPath}},
		Pty:    &pb.PTY{Cols: 80, Rows: 24},
	})
	if err == nil {
		var m *pb.StartResponse
		if m, err = st.Recv(); err == nil && m.GetInit() == nil {
			err = fmt.Errorf("first message of Start: %v, want init", m)
		}
		s.id = m.GetInit().GetProcessId()
	}
	if err != nil {
		cancel()
		cc.Close()
		return nil, fmt.Errorf("Start: %w", err)
	}
	go reader(s.ch, s.stopping.Load, func() ([]byte, error) {
		m, err := st.Recv()
		switch {
		case err != nil:
			return nil, err
		case m.GetStderr() != nil:
			return nil, fmt.Errorf("stderr on a pty: %q", m.GetStderr())
		case m.GetExit() != nil:
			return nil, fmt.Errorf("exited: %v", m.GetExit())
		}
		return m.GetStdout(), nil
	})
	return s, nil
}

func (s *startConn) send(b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), callWait)
	defer cancel()
	_, err := s.c.WriteStdin(ctx, &pb.WriteStdinRequest{ProcessId: s.id, Payload: &pb.WriteStdinRequest_Input{Input: b}})
	return err
}

func (s *startConn) out() <-chan arrival { return s.ch }

// close kills cat (its exit ends the stream), then drops the call and the connection.
func (s *startConn) close() error {
	var err error
	s.once.Do(func() {
		s.stopping.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), callWait)
		defer cancel()
		_, err = s.c.SendSignal(ctx, &pb.SendSignalRequest{ProcessId: s.id, Signal: pb.Signal_SIGNAL_SIGKILL})
		drain(s.ch)
		s.cancel()
		s.cc.Close()
	})
	return err
}

// --- ours over sandboxd.v1.Processes: Spawn with a pty, Attach (follow), WriteStdin ------------

type procsConn struct {
	procs    *procsClient
	id       int32
	cancel   context.CancelFunc
	ch       chan arrival
	once     sync.Once
	stopping atomic.Bool
}

func openProcs(addr string) (termConn, error) {
	pc, id, err := spawnCat(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	read, err := pc.attach(ctx, id)
	if err != nil {
		cancel()
		pc.end(id)
		pc.cc.Close()
		return nil, err
	}
	p := &procsConn{procs: pc, id: id, cancel: cancel, ch: make(chan arrival, outBuf)}
	go reader(p.ch, p.stopping.Load, read)
	return p, nil
}

func (p *procsConn) send(b []byte) error { return p.procs.write(p.id, b) }

func (p *procsConn) out() <-chan arrival { return p.ch }

func (p *procsConn) close() error {
	var err error
	p.once.Do(func() {
		p.stopping.Store(true)
		err = p.procs.end(p.id)
		drain(p.ch)
		p.cancel()
		p.procs.cc.Close()
	})
	return err
}
