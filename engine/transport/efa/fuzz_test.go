package efa

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParsePublished reads arbitrary bytes as a peer's efa record: no
// panic, an error or a checked record, and what parses encodes and parses
// again to the same value.
func FuzzParsePublished(f *testing.F) {
	f.Add([]byte(`{"provider":"efa","fabric":"efa","virt_addr":true,"devices":[{"name":"rdmap0s2","addr":"fe800000000000000000000000000001"}],"regions":[{"addr":4096,"length":8192,"keys":[7]}]}`))
	f.Add([]byte(`{"provider":"tcp;ofi_rxm","devices":[{"name":"lo","addr":"0200"}],"regions":[{"addr":1,"length":18446744073709551615,"keys":[1]}]}`))
	f.Add([]byte(`{"devices":[{"name":"a","addr":"zz"}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePublished(b)
		if err != nil {
			if p != nil {
				t.Fatal("error with a result")
			}
			return
		}
		for _, r := range p.Regions {
			if got, ok := p.Region(r.Addr, r.Length); !ok || got.Addr != r.Addr {
				t.Fatalf("region %#x+%d not found in its own record", r.Addr, r.Length)
			}
		}
		raw, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParsePublished(raw)
		if err != nil || !reflect.DeepEqual(p, again) {
			t.Fatalf("round trip: %+v -> %+v (%v)", p, again, err)
		}
	})
}
