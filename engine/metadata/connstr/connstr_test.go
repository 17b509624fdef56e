package connstr

import (
	"errors"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

func TestParseRedis(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Redis
		str  string
	}{
		{"redis://127.0.0.1:6379", Redis{Addr: "127.0.0.1:6379"}, "redis://127.0.0.1:6379"},
		{"redis://meta.example", Redis{Addr: "meta.example:6379"}, "redis://meta.example:6379"},
		{"redis://h:7000/", Redis{Addr: "h:7000"}, "redis://h:7000"},
		{"redis://h:7000/3", Redis{Addr: "h:7000", DB: 3, HasDB: true}, "redis://h:7000/3"},
		{"redis://:s3cret@h:1", Redis{Addr: "h:1", Password: "s3cret"}, "redis://:***@h:1"},
		{"redis://alice:p%40ss@h:1/0", Redis{Addr: "h:1", Username: "alice", Password: "p@ss", DB: 0, HasDB: true}, "redis://alice:***@h:1/0"},
		{"rediss://[::1]:6380", Redis{Addr: "[::1]:6380", TLS: true}, "rediss://[::1]:6380"},
	} {
		c, err := Parse(tc.in)
		assert.NilError(t, err, tc.in)
		assert.Equal(t, c.Kind, KindRedis)
		assert.DeepEqual(t, c.Redis, tc.want)
		assert.Equal(t, c.String(), tc.str)
		assert.Assert(t, !strings.Contains(c.String(), "s3cret"))
	}
}

func TestParseRedisMalformed(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{"REDIS://h:1", "lower case"},
		{"redis://", "no host"},
		{"redis://:1", "no host"},
		{"redis://h:0", "bad port"},
		{"redis://h:65536", "bad port"},
		{"redis://h:x", "invalid port"},
		{"redis://h:", "empty port"},
		{"redis://h:1/db", "database index"},
		{"redis://h:1/-1", "database index"},
		{"redis://h:1/01", "database index"},
		{"redis://h:1/2/3", "database index"},
		{"redis://h:1?db=2", "query"},
		{"redis://h:1#x", "fragment"},
		{"redis://alice@h:1", "without a password"},
		{"redis://alice:@h:1", "without a password"},
		{"redis:h:1", "want host:port"},
		{"redis://u:pw%0d%0a@h:1", "control characters"},
	} {
		_, err := Parse(tc.in)
		assert.Assert(t, errors.Is(err, ErrBadConn), "%q: %v", tc.in, err)
		assert.ErrorContains(t, err, tc.why, tc.in)
	}
	// No error shows the password.
	for _, in := range []string{"redis://u:hunter2@h:0", "redis://u:hunter2@h:1/x", "redis://:hunter2@h:1?x", "rediss://:hunter2@/", "redis://u:hunter2@h:1#f", "redis://u:hunter2@h:%zz"} {
		_, err := Parse(in)
		assert.Assert(t, err != nil, in)
		assert.Assert(t, !strings.Contains(err.Error(), "hunter2"), "%q: %v", in, err)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:pw@h:1/2":       "redis://u:***@h:1/2",
		"redis://:pw@h:1":          "redis://:***@h:1",
		"rediss://pw@h:1":          "rediss://***@h:1",
		"redis://h:1":              "redis://h:1",
		"http://h:1/metadata?k=@x": "http://h:1/metadata?k=@x",
		"P2PHANDSHAKE":             "P2PHANDSHAKE",
		"etcd://a:1,b:2":           "etcd://a:1,b:2",
	} {
		assert.Equal(t, Redact(in), want, in)
	}
}

func TestRedisHostsRemote(t *testing.T) {
	c, err := Parse("redis://:pw@127.0.0.1:6379")
	assert.NilError(t, err)
	assert.DeepEqual(t, c.Hosts(), []string{"127.0.0.1"})
	assert.Assert(t, !c.Remote())
	c, err = Parse("rediss://meta.example")
	assert.NilError(t, err)
	assert.Assert(t, c.Remote())
}
