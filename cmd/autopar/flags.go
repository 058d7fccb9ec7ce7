package main

import (
	"fmt"

	"github.com/autopar/autopar/mesh"
)

// parseSize reads the byte size of flag name (--memory) strictly.
func parseSize(name, s string) (int64, error) {
	n, err := mesh.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}
