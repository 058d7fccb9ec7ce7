package main

import (
	"fmt"

	"github.com/autopar/autopar/mesh"
)

// checkEmit validates --emit and -o before any work, so that a typo is reported at once
// rather than after a search of minutes.
func checkEmit(f compileFlags) error {
	switch {
	case f.emit != "" && f.emit != "programs":
		return fmt.Errorf("--emit %q: expected programs", f.emit)
	case f.emit != "" && f.out == "":
		return fmt.Errorf("--emit %s writes files: expected -o DIR with it", f.emit)
	}
	return nil
}

// parseSize reads the byte size of flag name (--memory, --memory-budget) strictly.
func parseSize(name, s string) (int64, error) {
	n, err := mesh.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}
