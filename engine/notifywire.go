package engine

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/kvferry/kvferry/engine/descriptor"
)

// The body of a notify RPC (specs/mooncake.md §3.6) is Mooncake's JSON
// object {"name": ..., "notify_msg": ...}. JSON strings are text, so bytes
// that are not UTF-8 would not survive it. Toward a peer whose descriptor
// announces descriptor.FeatureNotifyBytes (every kvferry engine), both
// fields travel base64-encoded and the object says so with
// "kvferry_encoding":"base64"; any bytes then arrive exactly (NUL and
// invalid UTF-8 included). Toward any other peer (Mooncake) the body is
// Mooncake's plain form, where invalid UTF-8 becomes U+FFFD.

// notifyEncodingBase64 is the "kvferry_encoding" of a base64 body.
const notifyEncodingBase64 = "base64"

// notifyBody is the notify RPC body.
type notifyBody struct {
	Name     string `json:"name"`
	Msg      string `json:"notify_msg"`
	Encoding string `json:"kvferry_encoding,omitempty"`
}

// encodeNotify returns the notify RPC body of n for a peer with descriptor
// d (nil: unknown, plain form).
func encodeNotify(n Notification, d *descriptor.Segment) ([]byte, error) {
	b := notifyBody{Name: n.Name, Msg: n.Msg}
	if d != nil && d.Has(descriptor.FeatureNotifyBytes) {
		b = notifyBody{
			Name:     base64.StdEncoding.EncodeToString([]byte(n.Name)),
			Msg:      base64.StdEncoding.EncodeToString([]byte(n.Msg)),
			Encoding: notifyEncodingBase64,
		}
	}
	return json.Marshal(&b)
}

// decodeNotify parses a notify RPC body in either form into the bytes the
// sender sent. Limits on notification sizes apply to what it returns.
func decodeNotify(body []byte) (Notification, error) {
	var b notifyBody
	if err := json.Unmarshal(body, &b); err != nil {
		return Notification{}, fmt.Errorf("notify body: %w", err)
	}
	switch b.Encoding {
	case "":
		return Notification{Name: b.Name, Msg: b.Msg}, nil
	case notifyEncodingBase64:
		name, err1 := base64.StdEncoding.DecodeString(b.Name)
		msg, err2 := base64.StdEncoding.DecodeString(b.Msg)
		if err1 != nil || err2 != nil {
			return Notification{}, fmt.Errorf("notify body: bad base64: %w", ErrInvalidArgument)
		}
		return Notification{Name: string(name), Msg: string(msg)}, nil
	}
	return Notification{}, fmt.Errorf("notify body: unknown kvferry_encoding %q: %w", b.Encoding, ErrInvalidArgument)
}
