package plan

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Manual is a hand-written plan in Megatron's terms: TP-way tensor parallelism inside each
// stage, PP pipeline stages of equal layer counts, and DP-way data parallelism.
type Manual struct{ TP, PP, DP int }

// ParseManual reads "tp=8,pp=2,dp=32"; a degree left out is 1. Each degree is a positive
// decimal integer, given at most once, and their product (the devices the plan uses) is
// at most math.MaxInt32; anything else (tp=2xyz, tp=2.9, tp=2,tp=4, a trailing comma) is an
// error that quotes the value.
func ParseManual(s string) (*Manual, error) {
	m := &Manual{TP: 1, PP: 1, DP: 1}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		key, num, ok := strings.Cut(part, "=")
		var deg *int
		switch key {
		case "tp":
			deg = &m.TP
		case "pp":
			deg = &m.PP
		case "dp":
			deg = &m.DP
		default:
			if !ok {
				return nil, fmt.Errorf("plan %q: %q is not tp=N, pp=N or dp=N", s, part)
			}
			return nil, fmt.Errorf("plan %q: unknown degree %q, expected tp, pp or dp", s, key)
		}
		if seen[key] {
			return nil, fmt.Errorf("plan %q: %s is given twice", s, key)
		}
		seen[key] = true
		n, err := strconv.ParseInt(num, 10, 64)
		if ok && num != "" && num[0] >= '0' && num[0] <= '9' && (isRange(err) || err == nil && n > math.MaxInt32) {
			return nil, fmt.Errorf("plan %q: %s=%s is more than %d devices", s, key, num, math.MaxInt32)
		}
		if !ok || err != nil || n < 1 || num[0] < '0' || num[0] > '9' {
			return nil, fmt.Errorf("plan %q: %s=%q: expected a positive integer N, as in %s=2", s, key, num, key)
		}
		*deg = int(n)
	}
	if int64(m.TP)*int64(m.PP)*int64(m.DP) > math.MaxInt32 {
		return nil, fmt.Errorf("plan %q: tp×pp×dp is more than %d devices", s, math.MaxInt32)
	}
	return m, nil
}

func isRange(err error) bool {
	var ne *strconv.NumError
	return errors.As(err, &ne) && ne.Err == strconv.ErrRange
}

func (m *Manual) String() string { return fmt.Sprintf("tp=%d,pp=%d,dp=%d", m.TP, m.PP, m.DP) }
