package samehost

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
)

// TestParseFDPid reads a Mooncake hip peer's {int fd; int pid} shm_name
// as its transport writes it (little-endian ints, upper-case hex) and
// refuses anything else.
func TestParseFDPid(t *testing.T) {
	fd, pid, err := parseFDPid("0700000039300000") // fd 7, pid 12345
	assert.NilError(t, err)
	assert.Equal(t, fd, 7)
	assert.Equal(t, pid, 12345)
	for _, bad := range []string{"", "07000000", "07000000393000", "0700000039300000FF", "FFFFFFFF39300000", "0700000000000000", "zz00000039300000"} {
		_, _, err := parseFDPid(bad)
		assert.Assert(t, err != nil, "%q", bad)
	}
	assert.Equal(t, mooncakeHIPShare(descriptor.Buffer{ShmName: "0700000039300000"}), engine.SharePosixFD)
	assert.Equal(t, mooncakeHIPShare(descriptor.Buffer{ShmName: strings.Repeat("AB", 64)}), engine.ShareLegacyIPC)
}

// FuzzParseFDPid: any shm_name parses without panicking; a result is
// exactly what its 8 bytes say, an error leaves none.
func FuzzParseFDPid(f *testing.F) {
	for _, s := range []string{"0700000039300000", "", "FFFFFFFFFFFFFFFF", strings.Repeat("AB", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fd, pid, err := parseFDPid(s)
		if err != nil {
			assert.Equal(t, fd, -1)
			return
		}
		raw, derr := hex.DecodeString(s)
		assert.NilError(t, derr)
		assert.Equal(t, len(raw), mooncakeHIPHandleBytes)
		assert.Equal(t, fd, int(int32(binary.LittleEndian.Uint32(raw))))
		assert.Equal(t, pid, int(int32(binary.LittleEndian.Uint32(raw[4:]))))
		assert.Assert(t, fd >= 0 && pid > 0)
	})
}
