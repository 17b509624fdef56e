// Package haaddr holds the names store HA shares with Mooncake: the etcd
// endpoint list a master or client is given ("etcd://h1:2379;h2:2379") and
// the key the leader publishes its address at. It is pure data with no
// dependencies beyond the standard library, so its fuzz target runs in a
// small binary; package ha uses it.
package haaddr

import (
	"fmt"
	"strings"
)

const (
	// DefaultClusterID is Mooncake's default --cluster_id.
	DefaultClusterID = "mooncake_cluster"
	// Scheme prefixes an etcd master address on the client side:
	// "etcd://host1:2379;host2:2379".
	Scheme = "etcd://"
)

// MasterViewKey returns the etcd key where the leader of clusterID publishes
// its address. An empty clusterID means DefaultClusterID; a trailing '/' is
// dropped.
func MasterViewKey(clusterID string) string {
	if clusterID == "" {
		clusterID = DefaultClusterID
	}
	return "mooncake-store/" + strings.TrimSuffix(clusterID, "/") + "/master_view"
}

// ParseEndpoints splits an etcd endpoint list as Mooncake writes it
// ("etcd://h1:2379;h2:2379", "h1:2379,h2:2379") into client endpoints.
func ParseEndpoints(s string) ([]string, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), Scheme)
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
		if f != "" {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("parse etcd endpoints %q: no endpoint", s)
	}
	return out, nil
}
