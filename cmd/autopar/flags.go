package main

import "fmt"

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
