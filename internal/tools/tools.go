//go:build tools

// Package tools pins the design-card dependencies in go.mod before every one of
// them has a user; it is never built (build tag tools).

package tools

import (
	_ "github.com/Mellanox/rdmamap"
	_ "github.com/ebitengine/purego"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "go.etcd.io/etcd/client/v3"
	_ "golang.org/x/sys/unix"
	_ "google.golang.org/grpc"
	_ "google.golang.org/protobuf/proto"
	_ "gotest.tools/v3/assert"
)
