// Command buildfake builds the fake libibverbs provider and prints its path
// (bench/rdma.sh --fake uses it for a smoke run).
package main

import (
	"fmt"
	"os"

	"github.com/kvferry/kvferry/tests/rdma/fakeverbs"
)

func main() {
	p, err := fakeverbs.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(p)
}
