package notifywire

import "testing"

func FuzzDecodeNotify(f *testing.F) {
	plain, _ := Encode("a", "b", false)
	f.Add(plain)
	exact, _ := Encode("x\x00y", "\xff\xfe", true)
	f.Add(exact)
	f.Add([]byte(`{"name":"a","notify_msg":"b","kvferry_encoding":"rot13"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		name, msg, err := Decode(in)
		if err != nil {
			return
		}
		// What decodes travels again, in the byte-exact form, unchanged.
		again, err := Encode(name, msg, true)
		if err != nil {
			t.Fatal(err)
		}
		name2, msg2, err := Decode(again)
		if err != nil || name2 != name || msg2 != msg {
			t.Fatalf("round trip: %q %q -> %q %q (%v)", name, msg, name2, msg2, err)
		}
	})
}
