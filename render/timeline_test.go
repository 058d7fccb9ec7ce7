package render

import (
	"bytes"
	"encoding/xml"
	"io"
	"testing"

	"github.com/autopar/autopar/internal/golden"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPredictedTimelineGolden(t *testing.T) {
	for _, c := range planCases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Predict(compilePlan(t, c))
			require.NoError(t, err)
			var buf bytes.Buffer
			require.NoError(t, Timeline(&buf, s))
			requireXML(t, buf.Bytes())
			golden.Check(t, c.name+"-timeline.svg", buf.String())
		})
	}
}

// requireXML fails unless data is well-formed XML.
func requireXML(t *testing.T, data []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			return
		}
		require.NoError(t, err)
	}
}

var _ = assert.Equal
