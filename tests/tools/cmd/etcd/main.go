// etcd for the local test cluster, built from the pinned go.etcd.io/etcd/server/v3 module
// (the same entry point as the upstream etcd binary).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
