package priority

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
)

// Matrix is Mooncake's NIC priority matrix: for each memory location
// ("cpu:0", "cuda:1"), the preferred NICs and the other usable ones
// (specs/mooncake.md §1.7). Its JSON form is {"loc": [[pref...], [avail...]]}.
type Matrix map[string][2][]string

// ErrMalformed is returned (wrapped) for a malformed priority matrix.
var ErrMalformed = errors.New("malformed nic priority matrix")

// Parse parses the JSON form; as Mooncake, every value must be an
// array of exactly two arrays of strings.
func Parse(s string) (Matrix, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	m := make(Matrix, len(raw))
	for loc, v := range raw {
		var e []json.RawMessage
		if err := json.Unmarshal(v, &e); err != nil || len(e) != 2 {
			return nil, fmt.Errorf("%w: %q is not a pair of lists", ErrMalformed, loc)
		}
		var pair [2][]string
		for i := range e {
			if err := json.Unmarshal(e[i], &pair[i]); err != nil {
				return nil, fmt.Errorf("%w: %q: %v", ErrMalformed, loc, err)
			}
			if pair[i] == nil {
				pair[i] = []string{}
			}
		}
		m[loc] = pair
	}
	return m, nil
}

// JSON returns the matrix as compact JSON with sorted locations.
func (m Matrix) JSON() json.RawMessage {
	out := make(map[string][2][]string, len(m))
	for k, v := range m {
		for i := range v {
			if v[i] == nil {
				v[i] = []string{}
			}
		}
		out[k] = v
	}
	b, _ := json.Marshal(out)
	return b
}

// Devices lists every NIC the matrix names, in the order Mooncake's
// resolver numbers them when it walks the locations in sorted order:
// first appearance, preferred before available.
func (m Matrix) Devices() []string {
	locs := make([]string, 0, len(m))
	for k := range m {
		locs = append(locs, k)
	}
	sort.Strings(locs)
	seen := map[string]bool{}
	var out []string
	for _, l := range locs {
		for _, list := range m[l] {
			for _, d := range list {
				if !seen[d] {
					seen[d] = true
					out = append(out, d)
				}
			}
		}
	}
	return out
}

// Filter keeps only the NICs in keep (nil keeps all); locations left
// without NICs stay, with empty lists.
func (m Matrix) Filter(keep func(string) bool) Matrix {
	out := make(Matrix, len(m))
	for loc, pair := range m {
		var np [2][]string
		for i, list := range pair {
			np[i] = []string{}
			for _, d := range list {
				if keep == nil || keep(d) {
					np[i] = append(np[i], d)
				}
			}
		}
		out[loc] = np
	}
	return out
}

// Select picks a NIC for a buffer at location among those usable (usable
// nil: all), as Mooncake's Topology::selectDevice does: on the first try a
// random (or round-robin, rr >= 0) preferred NIC, else an available one;
// retry n walks the preferred then the available NICs in order. An unknown
// location falls back to "*" (every NIC). It returns "" when none fits.
func (m Matrix) Select(location string, retry int, rr int, usable func(string) bool) string {
	pair, ok := m[location]
	if !ok {
		pair = [2][]string{m.Devices(), nil}
	}
	pick := func(list []string) []string {
		var out []string
		for _, d := range list {
			if usable == nil || usable(d) {
				out = append(out, d)
			}
		}
		return out
	}
	pref, avail := pick(pair[0]), pick(pair[1])
	if len(pref)+len(avail) == 0 {
		if ok && location != "*" {
			return m.Select("*", retry, rr, usable)
		}
		return ""
	}
	if retry == 0 {
		r := rr
		if r < 0 {
			r = rand.IntN(1 << 30)
		}
		if len(pref) > 0 {
			return pref[r%len(pref)]
		}
		return avail[r%len(avail)]
	}
	all := append(pref, avail...)
	return all[(retry-1)%len(all)]
}
