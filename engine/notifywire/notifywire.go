package notifywire

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// JSON strings are text, so bytes that are not UTF-8 would not survive
// Mooncake's body. Toward a peer whose descriptor announces
// descriptor.FeatureNotifyBytes (every kvferry engine), both fields travel
// base64-encoded and the object says so with "kvferry_encoding":"base64";
// any bytes then arrive exactly (NUL and invalid UTF-8 included). Toward
// any other peer (Mooncake) the body is Mooncake's plain form, where
// invalid UTF-8 becomes U+FFFD.

// encodingBase64 is the "kvferry_encoding" of a base64 body.
const encodingBase64 = "base64"

// ErrInvalid is returned (wrapped) for a body that is not a notify body.
var ErrInvalid = errors.New("invalid notify body")

// body is the notify RPC body.
type body struct {
	Name     string `json:"name"`
	Msg      string `json:"notify_msg"`
	Encoding string `json:"kvferry_encoding,omitempty"`
}

// Encode returns the notify RPC body carrying name and msg: the byte-exact
// base64 form when exact is true (the peer's descriptor announces
// descriptor.FeatureNotifyBytes), Mooncake's plain form otherwise.
func Encode(name, msg string, exact bool) ([]byte, error) {
	b := body{Name: name, Msg: msg}
	if exact {
		b = body{
			Name:     base64.StdEncoding.EncodeToString([]byte(name)),
			Msg:      base64.StdEncoding.EncodeToString([]byte(msg)),
			Encoding: encodingBase64,
		}
	}
	return json.Marshal(&b)
}

// Decode parses a notify RPC body in either form into the bytes the sender
// sent. Limits on notification sizes apply to what it returns.
func Decode(in []byte) (name, msg string, err error) {
	var b body
	if err := json.Unmarshal(in, &b); err != nil {
		return "", "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch b.Encoding {
	case "":
		return b.Name, b.Msg, nil
	case encodingBase64:
		n, err1 := base64.StdEncoding.DecodeString(b.Name)
		m, err2 := base64.StdEncoding.DecodeString(b.Msg)
		if err1 != nil || err2 != nil {
			return "", "", fmt.Errorf("%w: bad base64", ErrInvalid)
		}
		return string(n), string(m), nil
	}
	return "", "", fmt.Errorf("%w: unknown kvferry_encoding %q", ErrInvalid, b.Encoding)
}
