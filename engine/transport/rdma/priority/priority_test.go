package priority

import (
	"errors"
	"reflect"
	"testing"
)

func TestMatrixParseSelect(t *testing.T) {
	m, err := Parse(`{"cpu:0":[["mlx5_0","mlx5_1"],["mlx5_2"]],"cuda:0":[["mlx5_2"],[]]}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`{"cpu:0":[["a"]]}`, `{"cpu:0":"a"}`, `[1]`, `{"cpu:0":[["a"],[1]]}`, `nope`} {
		if _, err := Parse(bad); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s: %v, want ErrMalformed", bad, err)
		}
	}
	// First try: a preferred NIC (round-robin here); retries walk preferred
	// then available.
	up := func(d string) bool { return d != "mlx5_0" && d != "mlx5_1" }
	for _, c := range []struct {
		loc       string
		retry, rr int
		usable    func(string) bool
		want      string
	}{
		{"cpu:0", 0, 0, nil, "mlx5_0"},
		{"cpu:0", 0, 1, nil, "mlx5_1"},
		{"cpu:0", 1, -1, nil, "mlx5_0"},
		{"cpu:0", 2, -1, nil, "mlx5_1"},
		{"cpu:0", 3, -1, nil, "mlx5_2"},
		{"cpu:0", 4, -1, nil, "mlx5_0"},
		// Unusable NICs are skipped; nothing usable in a row falls back to "*".
		{"cpu:0", 0, -1, up, "mlx5_2"},
		{"cuda:0", 0, -1, func(d string) bool { return d == "mlx5_1" }, "mlx5_1"},
		{"cpu:0", 0, -1, func(string) bool { return false }, ""},
	} {
		if got := m.Select(c.loc, c.retry, c.rr, c.usable); got != c.want {
			t.Errorf("Select(%q, %d, %d): %q, want %q", c.loc, c.retry, c.rr, got, c.want)
		}
	}
	// Unknown location: any NIC.
	if m.Select("cpu:7", 0, -1, nil) == "" {
		t.Error("unknown location: no NIC")
	}
	// Filtering keeps the rows.
	f := m.Filter(func(d string) bool { return d == "mlx5_2" })
	if want := (Matrix{"cpu:0": {{}, {"mlx5_2"}}, "cuda:0": {{"mlx5_2"}, {}}}); !reflect.DeepEqual(f, want) {
		t.Fatalf("filtered %v, want %v", f, want)
	}
}
