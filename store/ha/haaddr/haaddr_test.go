package haaddr

import (
	"slices"
	"strings"
	"testing"
)

func TestMasterViewKey(t *testing.T) {
	for in, want := range map[string]string{
		"":      "mooncake-store/mooncake_cluster/master_view",
		"prod/": "mooncake-store/prod/master_view",
	} {
		if got := MasterViewKey(in); got != want {
			t.Errorf("MasterViewKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseEndpoints(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"etcd://h1:2379;h2:2379", []string{"h1:2379", "h2:2379"}},
		{"h1:2379,h2:2379", []string{"h1:2379", "h2:2379"}},
		{"127.0.0.1:2379", []string{"127.0.0.1:2379"}},
		{"http://127.0.0.1:2379", []string{"http://127.0.0.1:2379"}},
	} {
		got, err := ParseEndpoints(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseEndpoints(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := ParseEndpoints("etcd://"); err == nil {
		t.Error(`ParseEndpoints("etcd://") succeeded`)
	}
}

// FuzzParseEndpoints: any input either fails or yields non-empty endpoints
// without separators.
func FuzzParseEndpoints(f *testing.F) {
	for _, s := range []string{"etcd://h1:2379;h2:2379", "a,b", "", "etcd://", ";;;", "h:1 h:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		eps, err := ParseEndpoints(s)
		if (err == nil) != (len(eps) > 0) {
			t.Fatalf("%q: err %v with %d endpoints", s, err, len(eps))
		}
		for _, e := range eps {
			if e == "" || strings.ContainsAny(e, ";, ") {
				t.Fatalf("%q: bad endpoint %q", s, e)
			}
		}
	})
}
