package autopar

import "flag"

func init() {
	flag.BoolVar(&soundMemory, "sound-memory", soundMemory, "price a range's optimistic memory by its floors alone (bound.go, soundMemory)")
}
