package passes

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/autopar/autopar/ir"
)

// Config is what the passes of Table read: one value for the whole pipeline, so that the CLI
// fills it once from its flags.
type Config struct {
	// Optimizer is the update the "optimizer" pass appends.
	Optimizer Optimizer
	// Check runs ir.Verify after every pass (tests and `--check`).
	Check bool
	// AfterPass, when set, is called after each pass with the graph it produced and the
	// time it took: what `--dump` and `--time` hang on. It must not modify the graph.
	AfterPass func(pass string, g *ir.Graph, took time.Duration)
}

// Pass is one row of Table.
type Pass struct {
	Name string
	// Doc is one line for `autopar compile --help`.
	Doc string
	// Run returns the transformed graph. It must not modify its input: a pass that rewrites
	// clones first, so that a caller can keep the graph before the pass (for --dump).
	Run func(*ir.Graph, *Config) (*ir.Graph, error)
	// Requires names passes that must come earlier in Table; checked when the package loads.
	Requires []string
}

// Table is the one ordered list of passes. Nothing runs outside it: a new pass is a row
// here, placed after the passes it requires.
var Table = []Pass{
	{Name: "verify", Doc: "check the graph's invariants (types, names, order)", Run: runVerify},
	{Name: "precision", Doc: "compute the forward in the --precision dtype (float params declared in it, inputs cast on entry)",
		Run: runPrecision, Requires: []string{"verify"}},
	{Name: "autodiff", Doc: "append the backward ops: grad.<param> for every param of the loss (first output)",
		Run: runAutodiff, Requires: []string{"verify"}},
	{Name: "optimizer", Doc: "append the optimizer update of every param and its state",
		Run: runOptimizer, Requires: []string{"autodiff"}},
}

func init() {
	if err := checkTable(Table); err != nil {
		panic("passes: " + err.Error())
	}
}

// checkTable enforces the ordering constraints: names are unique and every required pass
// comes earlier.
func checkTable(t []Pass) error {
	seen := map[string]bool{}
	for _, p := range t {
		if p.Name == "" || p.Run == nil {
			return fmt.Errorf("pass %q has no name or no function", p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("pass %s is listed twice", p.Name)
		}
		for _, r := range p.Requires {
			if !seen[r] {
				return fmt.Errorf("pass %s requires %s, which does not come before it", p.Name, r)
			}
		}
		seen[p.Name] = true
	}
	return nil
}

// Names lists the passes in order.
func Names() []string {
	out := make([]string, len(Table))
	for i, p := range Table {
		out[i] = p.Name
	}
	return out
}

// Lookup returns the row of the named pass.
func Lookup(name string) (*Pass, bool) {
	for i := range Table {
		if Table[i].Name == name {
			return &Table[i], true
		}
	}
	return nil, false
}

// Error is the failure of one pass: it names the pass and keeps the cause, so that
// errors.As still finds a positioned *ir.Error inside.
type Error struct {
	Pass string
	Err  error
}

// Error puts the position first when the cause has one: "m.ir:3:5: autodiff: grad: ...".
func (e *Error) Error() string {
	var ie *ir.Error
	if errors.As(e.Err, &ie) && ie.Pos.IsValid() && strings.HasPrefix(e.Err.Error(), ie.Pos.String()+": ") {
		rest := strings.TrimPrefix(e.Err.Error(), ie.Pos.String()+": ")
		return ie.Pos.String() + ": " + e.Pass + ": " + rest
	}
	return e.Pass + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Run runs the passes of Table in order on g, up to and including upTo ("" runs them all),
// and returns the last graph. With cfg.Check, ir.Verify runs after every pass and a pass that
// leaves an invalid graph is reported by name. g itself is not modified.
func Run(g *ir.Graph, cfg *Config, upTo string) (*ir.Graph, error) {
	return runTable(Table, g, cfg, upTo)
}

func runTable(table []Pass, g *ir.Graph, cfg *Config, upTo string) (*ir.Graph, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if upTo != "" && !slices.ContainsFunc(table, func(p Pass) bool { return p.Name == upTo }) {
		return nil, fmt.Errorf("unknown pass %q, want one of %s", upTo, strings.Join(Names(), ", "))
	}
	for _, p := range table {
		start := time.Now()
		next, err := p.Run(g, cfg)
		if err != nil {
			return nil, &Error{Pass: p.Name, Err: err}
		}
		took := time.Since(start)
		if cfg.Check {
			if err := ir.Verify(next); err != nil {
				return nil, &Error{Pass: p.Name, Err: fmt.Errorf("left an invalid graph: %w", err)}
			}
		}
		if cfg.AfterPass != nil {
			cfg.AfterPass(p.Name, next, took)
		}
		g = next
		if p.Name == upTo {
			break
		}
	}
	return g, nil
}

func runVerify(g *ir.Graph, _ *Config) (*ir.Graph, error) { return g, ir.Verify(g) }
