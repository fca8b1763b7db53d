// Command etcd is etcd's own server (go.etcd.io/etcd/server/v3/etcdmain),
// built from the Go module proxy in a module of its own so Portico's go.mod
// does not gain etcd's dependencies. It is the peer kvnode's consensus tier
// is benchmarked against (kvnode/cp BenchmarkCPVsEtcd); `make etcd` builds
// it into .run/bin/etcd.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
