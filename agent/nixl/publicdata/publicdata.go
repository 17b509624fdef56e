// Package publicdata is the codec of the NIXL plugin's public metadata
// blob for one registration (what getPublicData returns and
// loadRemoteMD reads): "kvf1 <addr hex> <len> <segment name>". It is pure
// data with no dependencies beyond the standard library, so its fuzz target
// runs in a small binary.
package publicdata

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// prefix starts every public-data blob; the version lets a later format
// be told apart.
const prefix = "kvf1 "

// ErrInvalid is returned (wrapped) for a blob that Format did not make.
var ErrInvalid = errors.New("invalid public data")

// Format is the inverse of Parse: "kvf1 <addr hex> <len> <segment name>".
func Format(addr, n uint64, seg string) string {
	return prefix + strconv.FormatUint(addr, 16) + " " + strconv.FormatUint(n, 10) + " " + seg
}

// Parse splits a blob made by Format into the registration's address,
// length and segment name; an error gives no result.
func Parse(blob string) (addr, n uint64, seg string, err error) {
	rest, ok := strings.CutPrefix(blob, prefix)
	if !ok {
		return 0, 0, "", fmt.Errorf("public data %.40q: not kvferry's: %w", blob, ErrInvalid)
	}
	f := strings.SplitN(rest, " ", 3)
	if len(f) != 3 || f[2] == "" {
		return 0, 0, "", fmt.Errorf("public data %.40q: malformed: %w", blob, ErrInvalid)
	}
	addr, err1 := strconv.ParseUint(f[0], 16, 64)
	n, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || n == 0 || addr+n < addr {
		return 0, 0, "", fmt.Errorf("public data %.40q: bad range: %w", blob, ErrInvalid)
	}
	return addr, n, f[2], nil
}
