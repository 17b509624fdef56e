package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"google.golang.org/protobuf/proto"
)

// muxBufBytes is the size of the read and write buffers of a mux connection.
const muxBufBytes = 64 << 10

// ServeMuxConn answers mux requests on conn with srv until conn fails, the
// client closes it, or the caller closes it (its way to stop this call).
// The client's MuxHello must already have been read from conn; ServeMuxConn
// answers it first. Requests are served one after another in the calling
// goroutine, and answers to requests that arrived together go out in one
// write. srv's errors may be plain store errors or gRPC status errors;
// either way the client sees what a gRPC call would have returned. It
// returns nil when the client closed the connection, the failure otherwise
// (a malformed frame closes nothing: the caller closes conn).
func ServeMuxConn(ctx context.Context, conn net.Conn, srv MasterServer) error {
	if _, err := conn.Write(MuxHello[:]); err != nil {
		return fmt.Errorf("mux hello: %w", err)
	}
	r := bufio.NewReaderSize(conn, muxBufBytes)
	w := bufio.NewWriterSize(conn, muxBufBytes)
	var hdr [MuxHeaderBytes]byte
	var body []byte
	out := make([]byte, MuxHeaderBytes, 4<<10)
	mo := proto.MarshalOptions{}
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("mux read: %w", err)
		}
		h, err := ParseMuxHeader(hdr[:])
		if err != nil {
			return err
		}
		if h.Status != 0 {
			return fmt.Errorf("%w: request with status %d", ErrMuxFrame, h.Status)
		}
		if cap(body) < int(h.BodyBytes) {
			body = make([]byte, h.BodyBytes)
		}
		body = body[:h.BodyBytes]
		if _, err := io.ReadFull(r, body); err != nil {
			return fmt.Errorf("mux read body: %w", err)
		}
		call := &muxCalls[h.Method]
		req := call.newReq()
		var resp proto.Message
		if err = proto.Unmarshal(body, req); err != nil {
			err = fmt.Errorf("decode %s request: %v: %w", h.Method.Name(), err, ErrInvalidParams)
		} else {
			resp, err = call.serve(ctx, srv, req)
		}
		out = out[:MuxHeaderBytes]
		status := uint16(0)
		if err != nil {
			out, status = AppendMuxError(out, err)
		} else if out, err = mo.MarshalAppend(out, resp); err != nil {
			out, status = AppendMuxError(out[:MuxHeaderBytes], fmt.Errorf("encode %s answer: %v: %w", h.Method.Name(), err, ErrInternal))
		}
		if len(out)-MuxHeaderBytes > MaxMuxBody {
			out, status = AppendMuxError(out[:MuxHeaderBytes], fmt.Errorf("%s answer of %d bytes (at most %d): %w",
				h.Method.Name(), len(out)-MuxHeaderBytes, MaxMuxBody, ErrBufferOverflow))
		}
		PutMuxHeader(out, MuxHeader{BodyBytes: uint32(len(out) - MuxHeaderBytes), ID: h.ID, Method: h.Method, Status: status})
		if _, err := w.Write(out); err != nil {
			return fmt.Errorf("mux write: %w", err)
		}
		if cap(out) > 4*muxBufBytes {
			out = make([]byte, MuxHeaderBytes, 4<<10) // do not keep a huge answer's buffer
		}
		if cap(body) > 4*muxBufBytes {
			body = nil // nor a huge request's
		}
		// Flush once no further whole request is already buffered: answers
		// to requests that arrived together leave in one write.
		if !wholeFrameBuffered(r) {
			if err := w.Flush(); err != nil {
				return fmt.Errorf("mux write: %w", err)
			}
		}
	}
}

// wholeFrameBuffered reports whether r holds a whole frame already.
func wholeFrameBuffered(r *bufio.Reader) bool {
	n := r.Buffered()
	if n < MuxHeaderBytes {
		return false
	}
	b, _ := r.Peek(MuxHeaderBytes)
	return uint64(n) >= MuxHeaderBytes+uint64(binary.LittleEndian.Uint32(b))
}
