package frame

import (
	"bytes"
	"testing"
)

// FuzzParseFrames reads arbitrary bytes as a log file (a tail torn by a
// crash, a damaged disk): the intact prefix is returned and re-frames to
// exactly those bytes.
func FuzzParseFrames(f *testing.F) {
	f.Add(Append(Append(nil, Record{Seq: 1, Data: []byte("a")}), Record{Seq: 2, Data: []byte("bc")}))
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, n, err := Parse(b)
		if n > len(b) || (err == nil) != (n == len(b)) {
			t.Fatalf("intact %d of %d, err %v", n, len(b), err)
		}
		var again []byte
		for _, r := range recs {
			again = Append(again, r)
		}
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-framed prefix differs")
		}
	})
}

// FuzzParseSnapshot reads arbitrary bytes as a snapshot file.
func FuzzParseSnapshot(f *testing.F) {
	f.Add(Snapshot(7, []byte("state")))
	f.Add([]byte("KVFSNAP1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, data, err := ParseSnapshot(b)
		if err != nil {
			return
		}
		if !bytes.Equal(Snapshot(seq, data), b) {
			t.Fatalf("re-framed snapshot differs")
		}
	})
}
