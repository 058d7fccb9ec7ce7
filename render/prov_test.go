package render

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// render classifies a step's values into forward, backward and update by the provenance
// autodiff records (ir.RoleGrad), not by names: renaming every value changes nothing.
func TestPhasesIgnoreNames(t *testing.T) {
	step := compilePlan(t, planCases[1]).Step()
	anon := step.Clone()
	for i := range anon.Values {
		anon.Values[i].Name = fmt.Sprintf("v%06dx", i)
	}
	ph := phases(step)
	require.Contains(t, ph, phaseB)
	require.Contains(t, ph, phaseU)
	require.Equal(t, ph, phases(anon.Clone()))
}
