package main

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// Input limits. Each refuses, with a message naming the limit and its flag, an input that
// would otherwise read, allocate or search without bound; the defaults are far past every
// model of testdata and the zoo (the largest, moe-70b, is 129 KB and 2,400 ops; a 1,000-layer
// GPT is 2.3 MB and 44,000 ops).
const (
	defaultMaxFileSize = frontend.DefaultMaxFileBytes // 64 MiB
	defaultMaxOps      = 100_000
	defaultMaxDevices  = 65_536
)

// globalFlags are the flags every command takes.
type globalFlags struct {
	quiet       bool
	maxFileSize string
	maxOps      int
	maxDevices  int
}

// global holds the flags of the command line being run; newRoot resets it to the defaults.
var global globalFlags

func addGlobalFlags(fl *pflag.FlagSet) {
	global = globalFlags{}
	fl.BoolVarP(&global.quiet, "quiet", "q", false, "print no progress on stderr")
	fl.StringVar(&global.maxFileSize, "max-file-size", "64MiB", "refuse input files larger than `SIZE`")
	fl.IntVar(&global.maxOps, "max-ops", defaultMaxOps, "refuse models with more than `N` values (ops, params and inputs)")
	fl.IntVar(&global.maxDevices, "max-devices", defaultMaxDevices, "refuse clusters of more than `N` devices")
}

// limits are the effective limits: the flags', or the defaults where a test calls a command
// function directly.
func limits() (maxFile int64, maxOps, maxDevices int, err error) {
	maxFile, maxOps, maxDevices = defaultMaxFileSize, defaultMaxOps, defaultMaxDevices
	if global.maxFileSize != "" {
		if maxFile, err = mesh.ParseBytes(global.maxFileSize); err != nil {
			return 0, 0, 0, fmt.Errorf("--max-file-size: %w", err)
		}
	}
	if global.maxOps != 0 {
		maxOps = global.maxOps
	}
	if global.maxDevices != 0 {
		maxDevices = global.maxDevices
	}
	if maxOps < 0 || maxDevices < 0 {
		return 0, 0, 0, fmt.Errorf("--max-ops and --max-devices must be positive, got %d and %d", maxOps, maxDevices)
	}
	return maxFile, maxOps, maxDevices, nil
}

// parseModel reads and parses the .ir file at path within the limits.
func parseModel(path string) (*ir.Graph, error) {
	_, maxOps, _, err := limits()
	if err != nil {
		return nil, err
	}
	src, err := readInput(path)
	if err != nil {
		return nil, err
	}
	g, err := frontend.ParseModel(path, src, maxOps)
	var ve *frontend.ValuesError
	if errors.As(err, &ve) {
		return nil, fmt.Errorf("%w; raise it with --max-ops", err)
	}
	return g, err
}

// parseCluster reads --cluster within the device limit.
func parseCluster(spec string) (*mesh.Cluster, error) {
	_, _, maxDevices, err := limits()
	if err != nil {
		return nil, err
	}
	c, err := mesh.ParseCluster(spec)
	if err != nil {
		return nil, err
	}
	if c.Devices() > maxDevices {
		return nil, fmt.Errorf("--cluster %s: %d hosts × %d devices is %d devices, more than the limit of %d; raise it with --max-devices",
			spec, c.Hosts, c.DevicesPerHost, c.Devices(), maxDevices)
	}
	return c, nil
}

// readPlanFile reads the plan.json at path within the file size limit.
func readPlanFile(path string) (*autopar.Plan, error) {
	src, err := readInput(path)
	if err != nil {
		return nil, err
	}
	p, err := autopar.ReadPlan(bytes.NewReader(src))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// readInput reads the file at path, refusing one past --max-file-size.
func readInput(path string) ([]byte, error) {
	maxFile, _, _, err := limits()
	if err != nil {
		return nil, err
	}
	src, err := frontend.ReadFile(path, maxFile)
	var se *frontend.SizeError
	if errors.As(err, &se) {
		return nil, fmt.Errorf("%w; raise the limit with --max-file-size", err)
	}
	return src, err
}
