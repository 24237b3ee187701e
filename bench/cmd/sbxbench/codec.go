package main

import (
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	pb "sigs.k8s.io/agent-sandbox/packages/sandboxd/spec/process/v1"
)

// startCodec decodes StartResponse messages without copying their output bytes: it reads the
// field header and the length, checks them against the message size, and only unmarshals the
// small messages (init, exit). It keeps the client's work per received byte near zero, so that
// the client is not what limits a stream. Requests are marshalled by the proto codec.
type startCodec struct{}

// startEvent is what startCodec decodes into.
type startEvent struct {
	stdout, stderr int // bytes of output in this message
	msg            pb.StartResponse
}

func (startCodec) Name() string { return "proto" }

func (startCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (startCodec) Unmarshal(data mem.BufferSlice, v any) error {
	ev, ok := v.(*startEvent)
	if !ok {
		return encoding.GetCodecV2("proto").Unmarshal(data, v)
	}
	*ev = startEvent{}
	total := data.Len()
	var head [16]byte
	n, err := io.ReadFull(data.Reader(), head[:min(total, len(head))])
	if err != nil {
		return err
	}
	if n == 0 {
		return nil // an empty StartResponse
	}
	tag := head[0]
	if tag != 0x12 && tag != 0x1a { // not stdout (2) or stderr (3): small, unmarshal it
		return proto.Unmarshal(data.Materialize(), &ev.msg)
	}
	var l, shift, i = 0, 0, 1
	for ; i < n; i++ {
		l |= int(head[i]&0x7f) << shift
		shift += 7
		if head[i] < 0x80 {
			break
		}
	}
	if i >= n || shift > 35 {
		return errors.New("bad length varint in StartResponse")
	}
	if 1+i+l != total {
		return fmt.Errorf("StartResponse: %d bytes of output in a %d-byte message", l, total)
	}
	if tag == 0x12 {
		ev.stdout = l
	} else {
		ev.stderr = l
	}
	return nil
}
