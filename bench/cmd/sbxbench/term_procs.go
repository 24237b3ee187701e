package main

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// sandboxd.v1.Processes has no Go package this module can import (the SDK's is internal), and
// the few messages the terminal benchmark needs are small: they are written and read here with
// protowire, field numbers as in proto/sandboxd/v1/processes.proto.

// rawMsg is a message's wire bytes; rawCodec hands them to grpc-go as they are.
type rawMsg struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*rawMsg)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMsg)
	if !ok {
		return fmt.Errorf("rawCodec: %T", v)
	}
	m.b = data.Materialize()
	return nil
}

const procsService = "/sandboxd.v1.Processes/"

type procsClient struct{ cc *grpc.ClientConn }

// spawnCat connects to addr and spawns cat on a pty there.
func spawnCat(addr string) (*procsClient, int32, error) {
	cc, err := dial(addr, 0)
	if err != nil {
		return nil, 0, err
	}
	pc := &procsClient{cc: cc}
	id, err := pc.spawn()
	if err != nil {
		cc.Close()
		return nil, 0, err
	}
	return pc, id, nil
}

func (p *procsClient) call(method string, req []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callWait)
	defer cancel()
	var resp rawMsg
	err := p.cc.Invoke(ctx, procsService+method, &rawMsg{req}, &resp, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	return resp.b, nil
}

// spawn starts cat on a 24x80 pty, stdin open, and returns its id.
func (p *procsClient) spawn() (int32, error) {
	var size, spec, req []byte
	size = protowire.AppendTag(size, 1, protowire.VarintType) // rows
	size = protowire.AppendVarint(size, 24)
	size = protowire.AppendTag(size, 2, protowire.VarintType) // cols
	size = protowire.AppendVarint(size, 80)
	spec = protowire.AppendTag(spec, 1, protowire.BytesType) // command
	spec = protowire.AppendString(spec, catPath)
	spec = protowire.AppendTag(spec, 5, protowire.VarintType) // stdin
	spec = protowire.AppendVarint(spec, 1)
	spec = protowire.AppendTag(spec, 6, protowire.BytesType) // pty
	spec = protowire.AppendBytes(spec, size)
	req = protowire.AppendTag(req, 1, protowire.BytesType) // spec
	req = protowire.AppendBytes(req, spec)
	info, err := p.call("Spawn", req)
	if err != nil {
		return 0, err
	}
	var id int32
	err = walk(info, func(n protowire.Number, _ []byte, x uint64) error {
		if n == 1 {
			id = int32(x)
		}
		return nil
	})
	if err == nil && id <= 0 {
		err = errors.New("Spawn: no id in the answer")
	}
	return id, err
}

func (p *procsClient) write(id int32, data []byte) error {
	req := idMsg(id)
	req = protowire.AppendTag(req, 2, protowire.BytesType)
	req = protowire.AppendBytes(req, data)
	_, err := p.call("WriteStdin", req)
	return err
}

// end kills the process, waits for its exit and removes it.
func (p *procsClient) end(id int32) error {
	req := idMsg(id)
	req = protowire.AppendTag(req, 2, protowire.VarintType) // signal
	req = protowire.AppendVarint(req, 9)
	if _, err := p.call("Signal", req); err != nil {
		return err
	}
	if _, err := p.call("Wait", idMsg(id)); err != nil {
		return err
	}
	_, err := p.call("Remove", idMsg(id))
	return err
}

// attach follows the process's stdout from offset 0; the function returns each Output's data.
func (p *procsClient) attach(ctx context.Context, id int32) (func() ([]byte, error), error) {
	st, err := p.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, procsService+"Attach",
		grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return nil, err
	}
	req := idMsg(id)
	req = protowire.AppendTag(req, 4, protowire.VarintType) // follow
	req = protowire.AppendVarint(req, 1)
	req = protowire.AppendTag(req, 6, protowire.VarintType) // skip_stderr
	req = protowire.AppendVarint(req, 1)
	if err := st.SendMsg(&rawMsg{req}); err != nil {
		return nil, err
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	return func() ([]byte, error) {
		var m rawMsg
		if err := st.RecvMsg(&m); err != nil {
			return nil, err
		}
		var data []byte
		err := walk(m.b, func(n protowire.Number, v []byte, _ uint64) error {
			switch n {
			case 1: // output
				return walk(v, func(n protowire.Number, v []byte, _ uint64) error {
					if n == 3 {
						data = v
					}
					return nil
				})
			case 2:
				return errors.New("Attach: output truncated")
			case 3:
				return errors.New("Attach: the process exited")
			}
			return nil
		})
		return data, err
	}, nil
}

func idMsg(id int32) []byte {
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(id))
}

// walk calls f with each field of a message: its number, and its bytes (length-delimited) or
// its value (varint).
func walk(b []byte, f func(n protowire.Number, v []byte, x uint64) error) error {
	for len(b) > 0 {
		n, t, k := protowire.ConsumeTag(b)
		if k < 0 {
			return protowire.ParseError(k)
		}
		b = b[k:]
		var v []byte
		var x uint64
		switch t {
		case protowire.VarintType:
			x, k = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, k = protowire.ConsumeBytes(b)
		default:
			k = protowire.ConsumeFieldValue(n, t, b)
		}
		if k < 0 {
			return protowire.ParseError(k)
		}
		b = b[k:]
		if err := f(n, v, x); err != nil {
			return err
		}
	}
	return nil
}
