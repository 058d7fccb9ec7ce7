//go:build !linux

package main

// exchangeDirs swaps directories tmp and dir; without an atomic exchange, by two renames.
func exchangeDirs(tmp, dir string) error { return renameExchange(tmp, dir) }
