// Package netem is a user-space network emulator for the fault suite, for
// kernels built without sch_netem (this machine's): an nftables "queue"
// rule hands it every forwarded packet over NFQUEUE (netlink), and it gives
// each its verdict (accept or drop) after a delay, so the kernel puts the
// packet back on its way late, in another order, at a limited rate, or not
// at all. It is a test fixture (tests/faults), never part of the library.
package netem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Netlink and nfnetlink_queue constants (linux/netfilter/nfnetlink_queue.h).
const (
	nfnlSubsysQueue = 3

	nfqnlMsgPacket  = 0
	nfqnlMsgVerdict = 1
	nfqnlMsgConfig  = 2

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2
	nfqaPayload    = 10
	nfqaCapLen     = 19

	nfqaCfgCmd      = 1
	nfqaCfgParams   = 2
	nfqaCfgQueueMax = 3
	nfqaCfgMask     = 4
	nfqaCfgFlags    = 5

	nfqnlCfgCmdBind   = 1
	nfqnlCfgCmdUnbind = 2
	nfqnlCopyPacket   = 2
	nfqaCfgFGSO       = 1 << 2

	nfDrop   = 0
	nfAccept = 1

	nlmsgHdrLen  = 16
	nfgenHdrLen  = 4
	nlaHdrLen    = 4
	copyRange    = 64 // bytes of each packet copied to us: the IP header is enough
	queueMaxLen  = 16384
	socketBuffer = 8 << 20
)

// Packet is one queued packet: its id (for the verdict) and its length.
type Packet struct {
	ID  uint32
	Len int
}

// Queue is one bound NFQUEUE number.
type Queue struct {
	fd  int
	num uint16
	seq uint32

	mu  sync.Mutex // serializes sends
	out []byte
}

// Open binds NFQUEUE number num in the calling thread's network namespace.
func Open(num uint16) (*Queue, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("nfqueue socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nfqueue bind: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, socketBuffer)
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1)
	q := &Queue{fd: fd, num: num}
	cmd := []byte{nfqnlCfgCmdBind, 0, 0, 0} // command, pad, pf (unused since Linux 3.8)
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params, copyRange)
	params[4] = nfqnlCopyPacket
	maxLen := binary.BigEndian.AppendUint32(nil, queueMaxLen)
	flags := binary.BigEndian.AppendUint32(nil, nfqaCfgFGSO)
	for _, a := range [][]byte{
		attr(nfqaCfgCmd, cmd),
		append(attr(nfqaCfgParams, params), append(attr(nfqaCfgQueueMax, maxLen), append(attr(nfqaCfgFlags, flags), attr(nfqaCfgMask, flags)...)...)...),
	} {
		if err := q.request(nfqnlMsgConfig, a); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("nfqueue %d config: %w", num, err)
		}
	}
	return q, nil
}

// Close unbinds the queue and closes the socket.
func (q *Queue) Close() error {
	_ = q.request(nfqnlMsgConfig, attr(nfqaCfgCmd, []byte{nfqnlCfgCmdUnbind, 0, 0, 0}))
	return unix.Close(q.fd)
}

// attr encodes one netlink attribute, padded to 4 bytes.
func attr(typ uint16, data []byte) []byte {
	n := nlaHdrLen + len(data)
	b := make([]byte, (n+3)&^3)
	binary.NativeEndian.PutUint16(b[0:], uint16(n))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[nlaHdrLen:], data)
	return b
}

// message appends one nfnetlink message of type typ to b.
func (q *Queue) message(b []byte, typ uint16, flags uint16, attrs []byte) []byte {
	q.seq++
	n := nlmsgHdrLen + nfgenHdrLen + len(attrs)
	h := make([]byte, nlmsgHdrLen+nfgenHdrLen)
	binary.NativeEndian.PutUint32(h[0:], uint32(n))
	binary.NativeEndian.PutUint16(h[4:], nfnlSubsysQueue<<8|typ)
	binary.NativeEndian.PutUint16(h[6:], unix.NLM_F_REQUEST|flags)
	binary.NativeEndian.PutUint32(h[8:], q.seq)
	h[16] = unix.AF_UNSPEC
	binary.BigEndian.PutUint16(h[18:], q.num) // res_id, network order
	return append(append(b, h...), attrs...)
}

// request sends one message with an ACK request and waits for the ACK.
func (q *Queue) request(typ uint16, attrs []byte) error {
	q.mu.Lock()
	b := q.message(nil, typ, unix.NLM_F_ACK, attrs)
	seq := q.seq
	q.mu.Unlock()
	if err := unix.Sendto(q.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(q.fd, buf, 0)
		if err != nil {
			return err
		}
		for m := buf[:n]; len(m) >= nlmsgHdrLen; {
			l := int(binary.NativeEndian.Uint32(m))
			if l < nlmsgHdrLen || l > len(m) {
				return errors.New("short netlink message")
			}
			if binary.NativeEndian.Uint16(m[4:]) == unix.NLMSG_ERROR && binary.NativeEndian.Uint32(m[8:]) == seq && l >= nlmsgHdrLen+4 {
				if e := int32(binary.NativeEndian.Uint32(m[nlmsgHdrLen:])); e != 0 {
					return unix.Errno(-e)
				}
				return nil
			}
			m = m[(l+3)&^3:]
		}
	}
}

// Read blocks until packets arrive and appends them to ps.
func (q *Queue) Read(buf []byte, ps []Packet) ([]Packet, error) {
	n, _, err := unix.Recvfrom(q.fd, buf, 0)
	if err != nil {
		return ps, fmt.Errorf("nfqueue read: %w", err)
	}
	for m := buf[:n]; len(m) >= nlmsgHdrLen; {
		l := int(binary.NativeEndian.Uint32(m))
		if l < nlmsgHdrLen || l > len(m) {
			return ps, errors.New("nfqueue read: short message")
		}
		typ := binary.NativeEndian.Uint16(m[4:])
		if typ == nfnlSubsysQueue<<8|nfqnlMsgPacket && l >= nlmsgHdrLen+nfgenHdrLen {
			if p, ok := parsePacket(m[nlmsgHdrLen+nfgenHdrLen : l]); ok {
				ps = append(ps, p)
			}
		}
		m = m[min((l+3)&^3, len(m)):]
	}
	return ps, nil
}

// parsePacket reads the packet id and length from a packet message's
// attributes.
func parsePacket(a []byte) (Packet, bool) {
	var p Packet
	have := false
	payload := -1
	for len(a) >= nlaHdrLen {
		l := int(binary.NativeEndian.Uint16(a))
		typ := binary.NativeEndian.Uint16(a[2:]) & 0x3fff
		if l < nlaHdrLen || l > len(a) {
			break
		}
		v := a[nlaHdrLen:l]
		switch typ {
		case nfqaPacketHdr:
			if len(v) >= 4 {
				p.ID = binary.BigEndian.Uint32(v)
				have = true
			}
		case nfqaCapLen:
			if len(v) >= 4 {
				p.Len = int(binary.BigEndian.Uint32(v))
			}
		case nfqaPayload:
			payload = len(v)
			if len(v) >= 4 && v[0]>>4 == 4 && p.Len == 0 {
				p.Len = int(binary.BigEndian.Uint16(v[2:]))
			}
		}
		a = a[min((l+3)&^3, len(a)):]
	}
	if p.Len == 0 && payload > 0 {
		p.Len = payload
	}
	return p, have
}

// Verdicts sends accept (or drop) verdicts for ids in one sendmsg.
func (q *Queue) Verdicts(ids []uint32, accept bool) error {
	if len(ids) == 0 {
		return nil
	}
	v := uint32(nfDrop)
	if accept {
		v = nfAccept
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.out[:0]
	hdr := make([]byte, 8)
	for _, id := range ids {
		binary.BigEndian.PutUint32(hdr[0:], v)
		binary.BigEndian.PutUint32(hdr[4:], id)
		b = q.message(b, nfqnlMsgVerdict, 0, attr(nfqaVerdictHdr, hdr))
	}
	q.out = b
	if err := unix.Sendto(q.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("nfqueue verdict: %w", err)
	}
	return nil
}
