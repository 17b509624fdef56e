package efa

import "encoding/hex"

// MarkGone marks the peer endpoint address (hex) failed on every device,
// as a failed completion does.
func (t *Transport) MarkGone(addr string) {
	a, _ := hex.DecodeString(addr)
	for _, d := range t.devs {
		d.markGone(a)
	}
}

// IsGone reports whether the address (hex) is marked failed on a device.
func (t *Transport) IsGone(addr string) bool {
	a, _ := hex.DecodeString(addr)
	for _, d := range t.devs {
		if d.isGone(a) {
			return true
		}
	}
	return false
}
