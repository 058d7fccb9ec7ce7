package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// badInputs is the catalogue of bad inputs: each row is one command line as a user would
// type it, the exit status autopar must end with, and a piece of the message it must print.
// Arguments are split on blanks ('single quotes' keep blanks in one); $D is a directory
// holding the files of badFiles and the generated plan.json, trace.json and programs/,
// $M the repository's testdata/models. Every row runs the real command in a process of its
// own (the test binary re-executed as autopar, see TestMain), so exit codes and stderr are what a shell
// sees. Rows must fail fast: before a search, or on a model that compiles in a blink.
// Adding a case is adding a line.
var badInputs = []badInput{
	// Commands, arguments and flags.
	{`frobnicate`, 1, `unknown command "frobnicate"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --frob`, 1, `unknown flag: --frob`},
	{`compile --cluster cpu:2`, 1, `accepts 1 arg(s), received 0`},
	{`compile $M/mlp-tiny.ir $M/gpt-tiny.ir --cluster cpu:2`, 1, `accepts 1 arg(s), received 2`},
	{`compile $M/mlp-tiny.ir`, 1, `required flag(s) "cluster" not set`},
	{`shard $M/mlp-tiny.ir --cluster cpu:2`, 1, `required flag(s) "mesh" not set`},
	{`train $M/mlp-tiny.ir --steps abc`, 1, `invalid argument "abc" for "--steps"`},
	{`render $D/plan.json`, 1, `required flag(s) "output" not set`},

	// .ir model files.
	{`compile $D/nosuch.ir --cluster cpu:2`, 1, `$D/nosuch.ir: no such file or directory`},
	{`compile $D --cluster cpu:2`, 1, `is a directory`},
	{`compile $D/empty.ir --cluster cpu:2`, 1, `$D/empty.ir:1:1: the file is empty`},
	{`train $D/blank.ir`, 1, `$D/blank.ir:1:1: the file defines no values`},
	{`train $D/nul.ir`, 1, `$D/nul.ir:2:9: NUL byte (0x00)`},
	{`train $D/utf8.ir`, 1, `$D/utf8.ir:1:7: invalid UTF-8 (byte 0xff)`},
	{`train $D/unicode.ir`, 1, `$D/unicode.ir:2:11: unexpected character '′' (U+2032)`},
	{`train $D/syntax.ir`, 1, `$D/syntax.ir:2:5: unexpected '='`},
	{`train $D/shapes.ir`, 1, `$D/shapes.ir:3:`},
	{`train $D/unknown-op.ir`, 1, `$D/unknown-op.ir:2:5: unknown op relux`},
	{`train $D/undefined.ir`, 1, `$D/undefined.ir:2:10: undefined`},
	{`train $D/noloss.ir`, 1, `$D/noloss.ir:3:1: the first output x is the loss and must be a float scalar`},
	{`compile $D/binary.ir --cluster cpu:2`, 1, `NUL byte`},

	// --cluster: presets and counts.
	{`compile $M/mlp-tiny.ir --cluster tpu-v9`, 1, `unknown cluster preset "tpu-v9"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:0`, 1, `count after ':' must be a positive integer, got "0"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:-1`, 1, `got "-1"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:abc`, 1, `got "abc"`},
	{`compile $M/mlp-tiny.ir --cluster dgx-a100:2.5`, 1, `got "2.5"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:`, 1, `got ""`},
	{`compile $M/mlp-tiny.ir --cluster cpu:+2`, 1, `got "+2"`},
	{`compile $M/mlp-tiny.ir --cluster dgx-a100:99999999999999999999`, 1, `got "99999999999999999999"`},
	{`compile $M/mlp-tiny.ir --cluster ''`, 1, `unknown cluster preset ""`},
	// --cluster: JSON files.
	{`compile $M/mlp-tiny.ir --cluster $D/nosuch.json`, 1, `$D/nosuch.json: no such file or directory`},
	{`compile $M/mlp-tiny.ir --cluster $D/empty.json`, 1, `$D/empty.json: mesh: cluster spec "empty" is empty`},
	{`compile $M/mlp-tiny.ir --cluster $D/notjson.json`, 1, `$D/notjson.json: mesh: cluster spec "notjson": invalid character`},
	{`compile $M/mlp-tiny.ir --cluster $D/typo.json`, 1, `unknown field "device"`},
	{`compile $M/mlp-tiny.ir --cluster $D/hosts0.json`, 1, `hosts must be positive, got 0`},
	{`compile $M/mlp-tiny.ir --cluster $D/efficiency.json`, 1, `efficiency must be in (0, 1], got 2`},
	{`compile $M/mlp-tiny.ir --cluster $D/stringy.json`, 1, `cannot unmarshal string`},
	{`compile $M/mlp-tiny.ir --cluster $D/trailing.json`, 1, `trailing data after the JSON object`},
	{`compile $M/mlp-tiny.ir --cluster $D/negbw.json`, 1, `intra-host bandwidth must be positive`},
	{`compile $M/mlp-tiny.ir --cluster $D/slow.json`, 1, `more than the 1e+12 s the solver can weigh`},
	// --cluster: the roofline and calibration fields.
	{`compile $M/mlp-tiny.ir --cluster $D/flopstypo.json`, 1, `unknown field "fp8"`},
	{`compile $M/mlp-tiny.ir --cluster $D/negrate.json`, 1, `flops.matmul.f16 must not be negative, got -1`},
	{`compile $M/mlp-tiny.ir --cluster $D/nanoverhead.json`, 1, `invalid character 'N'`},
	{`compile $M/mlp-tiny.ir --cluster $D/negoverhead.json`, 1, `kernel overhead must not be negative, got -1`},
	{`compile $M/mlp-tiny.ir --cluster $D/negcores.json`, 1, `host cores must be 0 (devices do not share cores)`},
	{`compile $M/mlp-tiny.ir --cluster $D/speedup.json`, 1, `contraction speedup must be 0 (default) or from 1 to the 0 host cores, got 4`},
	{`compile $M/mlp-tiny.ir --cluster $D/badfitkind.json`, 1, `unknown collective "broadcast"`},
	{`compile $M/mlp-tiny.ir --cluster $D/badfitsize.json`, 1, `collectives[0]: devices must be 2 to the 2 devices per host, got 8`},
	{`compile $M/mlp-tiny.ir --cluster $D/dupfit.json`, 1, `collectives[1]: a second fit of all_reduce on 2 devices`},
	{`compile $M/mlp-tiny.ir --cluster $D/slowrate.json`, 1, `more than the 1e+12 s the solver can weigh`},
	// calibrate.
	{`calibrate --cluster dgx-a100 -o $D/x.json`, 1, `calibrate measures the built-in runtime, expected cpu or cpu:N`},
	{`calibrate --cluster cpu:0 -o $D/x.json`, 1, `count after ':' must be an integer from 1 to 256, got "0"`},
	{`calibrate --cluster cpu:4`, 1, `required flag(s) "output" not set`},
	{`calibrate --cluster cpu:1 --quick -q -o $D/nosuchdir/x.json`, 1, `nosuchdir`},
	{`compile $M/mlp-tiny.ir --cluster $D`, 1, `read $D: is a directory`},

	// --plan degrees and plan files.
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --plan tp=2xyz,pp=2junk`, 1, `plan "tp=2xyz,pp=2junk": tp="2xyz": expected a positive integer`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --plan tp=2.9`, 1, `tp="2.9"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --plan tp=2,tp=4`, 1, `tp is given twice`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --plan tp=0`, 1, `tp="0"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --plan tp=-2`, 1, `tp="-2"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --plan xp=2`, 1, `unknown degree "xp"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --plan tp=2,`, 1, `"" is not tp=N, pp=N or dp=N`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --plan tp=99999999999`, 1, `tp=99999999999 is more than 2147483647 devices`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --plan tp=4`, 1, `uses 4 devices`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --plan pp=2 --layers 1`, 1, `has more stages than the 1 layers of the model`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --plan $D/nosuch.json`, 1, `no such file or directory`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --plan $D/corrupt-plan.json`, 1, `$D/corrupt-plan.json: plan: corrupt plan.json`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --plan $D/empty.json`, 1, `$D/empty.json: plan: the file is empty, expected a plan.json`},

	// --mesh (shard).
	{`shard $M/mlp-tiny.ir --cluster cpu:2 --mesh 2`, 1, `--mesh: mesh shape "2": expected N0xN1`},
	{`shard $M/mlp-tiny.ir --cluster cpu:2 --mesh 0x2`, 1, `mesh shape "0x2": expected positive N0 and N1`},
	{`shard $M/mlp-tiny.ir --cluster cpu:2 --mesh -1x2`, 1, `mesh shape "-1x2"`},
	{`shard $M/mlp-tiny.ir --cluster cpu:2 --mesh 2x1x1`, 1, `mesh shape "2x1x1"`},
	{`shard $M/mlp-tiny.ir --cluster cpu:2 --mesh 65536x65536`, 1, `mesh shape "65536x65536": more than 2147483647 devices`},
	{`shard $M/mlp-tiny.ir --cluster cpu:2 --mesh 4x1`, 1, `4 devices do not divide the cluster's 2`},
	{`shard $M/mlp-tiny.ir --cluster cpu:2 --mesh 1x2 --time-limit -1s`, 1, `--time-limit -1s: expected a positive duration`},

	// Byte sizes.
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --memory lots`, 1, `--memory: size "lots": expected a positive number of bytes`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --memory 0`, 1, `size "0": expected at least one byte`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --memory -1GiB`, 1, `size "-1GiB"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --memory 16XB`, 1, `unknown unit "XB"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --memory 16GiBs`, 1, `unknown unit "GiBs"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --memory 1e400`, 1, `size "1e400": over the limit`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --memory NaN`, 1, `size "NaN"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --memory 0x10`, 1, `size "0x10"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --memory 1`, 1, `no pipeline plan fits in memory`},
	{`shard $M/mlp-tiny.ir --cluster cpu:2 --mesh 1x2 --memory 1`, 1, `memory budget 1 B per device is too small`},
	{`shard $M/mlp-tiny.ir --cluster cpu:2 --mesh 1x2 --memory 8Gx`, 1, `--memory: size "8Gx": unknown unit "Gx"`},

	// --batch, --microbatches, --schedule, --layers, --dump.
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --batch abc`, 1, `invalid argument "abc" for "--batch"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --batch -4`, 1, `--batch -4: expected a batch size from 1 to 2^50`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --batch 99999999999999`, 1, `has more than 2^50 elements`},
	{`compile $M/mlp-tiny.ir --cluster`, 1, `flag needs an argument: --cluster`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --microbatches many`, 1, `--microbatches "many": expected a count ≥ 1 or auto`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --microbatches 0`, 1, `--microbatches "0"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --microbatches -2`, 1, `--microbatches "-2"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --microbatches +2`, 1, `--microbatches "+2"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --microbatches 3`, 1, `not divisible by 3`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --schedule zigzag`, 1, `--schedule "zigzag": expected 1f1b or gpipe`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --schedule ''`, 1, `--schedule "": expected 1f1b or gpipe`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --remat some`, 1, `--remat "some": expected auto, none or full`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --batch-norm ghost`, 1, `--batch-norm "ghost": expected step (statistics over the step's batch) or microbatch`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --layers -1`, 1, `--layers -1: expected 0 (automatic) or more`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --dump nope`, 1, `--dump "nope": no such phase`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --optimizer lamb`, 1, `unknown optimizer "lamb"`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --lr -1`, 1, `--lr -1: expected a finite learning rate`},

	// --emit and -o.
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --emit pdf -o $D/out`, 1, `--emit "pdf": expected programs`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --emit programs`, 1, `--emit programs writes files into the output directory: give -o DIR`},
	{`model mlp -o $D/nodir/x.ir`, 1, `write $D/nodir/x.ir: no such file or directory`},
	{`model mlp -o $D`, 1, `write $D: is a directory`},

	// run and train knobs.
	{`run $M/mlp-tiny.ir --cluster cpu:2 --timeout -5s`, 1, `--timeout -5s: expected a positive duration`},
	{`run $M/mlp-tiny.ir --cluster cpu:2 --timeout 0s`, 1, `--timeout 0s: expected a positive duration`},
	{`run $M/mlp-tiny.ir --cluster cpu:2 --steps 0`, 1, `--steps must be at least 1, got 0`},
	{`run $M/mlp-tiny.ir --cluster cpu:2 --tolerance -1`, 1, `--tolerance -1: expected a finite relative difference`},
	{`run $M/mlp-tiny.ir --cluster cpu:2 --microbatches 2 --lr 1e30 --steps 3 --check`, 1, `step 2: the loss is NaN; training diverged`},
	{`run $M/mlp-tiny.ir --cluster cpu:2 --microbatches 2 --steps 1 --check --tolerance 1e-12`, 1, `past 1e-12 of the largest magnitude`},
	{`run $M/mlp-tiny.ir --cluster cpu:2 --tolerance 0`, 1, `--tolerance 0: expected a finite relative difference > 0`},
	{`train $M/mlp-tiny.ir --steps -1`, 1, `--steps must be at least 1, got -1`},
	{`train $M/mlp-tiny.ir --lr NaN`, 1, `--lr NaN: expected a finite learning rate`},
	{`train $M/mlp-tiny.ir --lr -0.1`, 1, `--lr -0.1`},
	{`train $M/mlp-tiny.ir --momentum 1`, 1, `--momentum 1: expected a momentum in [0, 1)`},
	{`train $M/mlp-tiny.ir --optimizer lamb`, 1, `unknown optimizer "lamb"`},
	{`train $M/mlp-tiny.ir --lr 1e30 --steps 5`, 1, `step 2: the loss is NaN; training diverged`},

	// plan.json for explain and render.
	{`explain $D/nosuch.json --memory`, 1, `no such file or directory`},
	{`explain $D/corrupt-plan.json --memory`, 1, `$D/corrupt-plan.json: plan: corrupt plan.json`},
	{`explain $D/empty.json --memory`, 1, `$D/empty.json: plan: the file is empty, expected a plan.json`},
	{`render $D/empty.json -o $D/out.dot`, 1, `$D/empty.json: plan: the file is empty, expected a plan.json`},
	{`explain $D/hosts0.json --memory`, 1, `$D/hosts0.json: plan: corrupt plan.json: json: unknown field "name"`},
	{`explain $D/plan.json`, 1, `give exactly one of --op NAME, --stage N or --memory`},
	{`explain $D/plan.json --op nosuch`, 1, `no value "nosuch" in the plan of mlp`},
	{`explain $D/plan.json --stage 99`, 1, `no stage 99; the plan has 2 stages`},
	{`explain $D/plan.json --stage -1`, 1, `no stage -1`},
	{`render $D/plan.json -o $D/out.pdf`, 1, `unknown output format "pdf" of $D/out.pdf, expected one of dot, svg, png`},
	{`render $D/plan.json --ops --max-nodes -5 -o $D/out.dot`, 1, `--max-nodes -5: expected a count ≥ 0`},
	{`render $D/plan.json --timeline -o $D/out.dot`, 1, `the timeline is a picture, not a graph: expected a .svg or .png file`},
	{`render $D/plan.json --trace $D/trace.json -o $D/out.svg`, 1, `--trace draws a timeline, expected --timeline with it`},
	{`render $D/plan.json --model $M/gpt-tiny.ir -o $D/out.dot`, 1, `plan: the plan belongs to model mlp`},

	// Trace files (render --timeline --trace).
	{`render $D/plan.json --timeline --trace $D/nosuch.json -o $D/out.svg`, 1, `no such file or directory`},
	{`render $D/plan.json --timeline --trace $D/empty.json -o $D/out.svg`, 1, `$D/empty.json: render: trace: the file is empty`},
	{`render $D/plan.json --timeline --trace $D/notjson.json -o $D/out.svg`, 1, `$D/notjson.json: render: trace: not Chrome trace-event JSON`},
	{`render $D/plan.json --timeline --trace $D/trailing-trace.json -o $D/out.svg`, 1, `data after the JSON object`},
	{`render $D/plan.json --timeline --trace $D/noevents.json -o $D/out.svg`, 1, `no instruction events`},
	{`render $D/plan.json --timeline --trace $D/foreign-trace.json -o $D/out.svg`, 1, `the trace is of another plan`},
	{`render $D/plan.json --timeline --trace $D/farfuture-trace.json -o $D/out.svg`, 1, `expected both in [0,`},

	// Model zoo knobs.
	{`model nosuch`, 1, `unknown model "nosuch", want one of gpt, mlp, moe, wresnet; presets: mlp-tiny`},
	{`model mlp --nope 3`, 1, `unknown flag: --nope`},
	{`model mlp --layers abc`, 1, `invalid argument "abc" for "--layers"`},
	{`model mlp extra`, 1, `model mlp: unexpected argument "extra"`},
	{`model mlp --layers -1`, 1, `mlp: layers must be at least 0, got -1`},
	{`model gpt --hidden 0`, 1, `gpt: hidden must be at least 1, got 0`},
	{`model gpt --dropout 2`, 1, `gpt: dropout must be in [0, 1), got 2`},
	{`model moe --experts 0`, 1, `moe: experts must be at least 1, got 0`},
	{`model gpt --heads 3`, 1, `gpt: hidden 32 is not divisible by heads 3`},
	// plan.json whose meaning is wrong (testdata/plans), and plans of another model or cluster.
	{`explain $P/bad-shared-device.json --memory`, 1, `device 0 is in stage 0 and stage 1`},
	{`explain $P/bad-overlap.json --memory`, 1, `stage 1 runs layers 0…3`},
	{`explain $P/bad-reversed.json --memory`, 1, `stage 0 runs layers 2…3`},
	{`explain $P/bad-in-flight.json --memory`, 1, `in_flight -3, expected 2`},
	{`explain $P/bad-prediction.json --memory`, 1, `predicted -1`},
	{`explain $P/bad-layer.json --memory`, 1, `stage 1 runs layers 2…99`},
	{`render $P/bad-schedule.json -o $D/x.svg`, 1, `schedule "zigzag" is not gpipe or 1f1b`},
	{`render $P/bad-device.json -o $D/x.svg`, 1, `device 9 is not in cluster`},
	{`compile $M/gpt-tiny.ir --cluster cpu:4 --plan $P/mlp-tiny-cpu4.json`, 1, `the plan belongs to model mlp`},
	{`run $M/mlp-tiny.ir --cluster cpu:8 --plan $P/mlp-tiny-cpu4.json --steps 1`, 1, `devices_per_host 4, not 8`},
	{`compile $M/mlp-tiny.ir --cluster cpu:4 --batch 32 --plan $P/mlp-tiny-cpu4.json`, 1, `with batch 16, not batch 32`},
	{`compile $M/wresnet-tiny.ir --cluster cpu:2 --microbatches 2`, 1, `2 micro-batches would change what stem.bn.batch_norm (batch_norm) computes: it couples the samples of the batch (statistics over it); expected 1 micro-batch (or --batch-norm microbatch`},
	{`compile $M/mlp-tiny.ir --cluster $C/16m-hosts.json --microbatches 1 --max-devices 16777216`, 1, `dp.MaxSearchStates`},
	// flags shared by compile and run
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --microbatch-size 3`, 1, `--microbatch-size 3: expected a divisor of the batch`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --microbatch-size 4 --microbatches 2`, 1, `--microbatch-size 4 and --microbatches 2: give one`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --time-limit -1s`, 1, `--time-limit -1s: expected a positive duration`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --ilp-iterations -2`, 1, `--ilp-iterations -2: expected a count ≥ 1, 0 for the default or -1 for no limit`},
	{`compile $M/mlp-tiny.ir --cluster cpu:2 --search quick`, 1, `--search "quick": expected fast or exhaustive`},
	{`model gpt --tied=2`, 1, `invalid argument "2" for "--tied"`},
	{`model gpt --tied 0`, 1, `model gpt: unexpected argument "0"`},
}

// badFiles are the inputs the rows name under $D.
var badFiles = map[string]string{
	"empty.ir":             "",
	"blank.ir":             "# a model was meant to be here\n\n",
	"nul.ir":               "param w: f32[2]\nx = relu\x00w\noutput x\n",
	"utf8.ir":              "param \xff: f32[2]\n",
	"unicode.ir":           "param w: f32[2]\nx = relu w\u2032\n",
	"syntax.ir":            "param w: f32[2]\nx = = relu w\n",
	"shapes.ir":            "param a: f32[2,3]\nparam b: f32[4,5]\nc = matmul a, b\noutput c\n",
	"unknown-op.ir":        "param w: f32[2]\nx = relux w\n",
	"undefined.ir":         "param w: f32[2]\nx = relu v\n",
	"noloss.ir":            "param w: f32[2]\nx = relu w\noutput x\n",
	"binary.ir":            "\x7fELF\x02\x01\x01\x00\x00\x00",
	"empty.json":           "",
	"notjson.json":         "hosts: 2\n",
	"typo.json":            `{"name":"x","hosts":1,"device":8}`,
	"hosts0.json":          clusterJSON(`"hosts":0`),
	"efficiency.json":      clusterJSON(`"efficiency":2`),
	"stringy.json":         clusterJSON(`"device_flops":"fast"`),
	"trailing.json":        clusterJSON(``) + `{}`,
	"negbw.json":           clusterJSON(`"intra_host_bandwidth":-1`),
	"slow.json":            clusterJSON(`"device_flops":1e-300`),
	"flopstypo.json":       clusterJSON(`"flops":{"matmul":{"fp8":1}}`),
	"negrate.json":         clusterJSON(`"flops":{"matmul":{"f16":-1}}`),
	"nanoverhead.json":     clusterJSON(`"kernel_overhead":NaN`),
	"negoverhead.json":     clusterJSON(`"kernel_overhead":-1`),
	"negcores.json":        clusterJSON(`"host_cores":-1`),
	"speedup.json":         clusterJSON(`"contraction_speedup":4`),
	"badfitkind.json":      clusterJSON(`"collectives":[{"kind":"broadcast","devices":2,"alpha":1,"beta":1}]`),
	"badfitsize.json":      clusterJSON(`"collectives":[{"kind":"all_reduce","devices":8,"alpha":1,"beta":1}]`),
	"dupfit.json":          clusterJSON(`"collectives":[{"kind":"all_reduce","devices":2,"alpha":1,"beta":1},{"kind":"all_reduce","devices":2,"alpha":1,"beta":1}]`),
	"slowrate.json":        clusterJSON(`"flops":{"matmul":{"f32":1e-300},"vector":{"f32":1e-300}}`),
	"corrupt-plan.json":    `{"version":`,
	"noevents.json":        `{"traceEvents":[]}`,
	"foreign-trace.json":   `{"traceEvents":[{"name":"load","cat":"load","ph":"X","ts":0,"dur":1,"tid":7,"args":{"instr":0}}]}`,
	"farfuture-trace.json": `{"traceEvents":[{"name":"load","cat":"load","ph":"X","ts":1e300,"dur":1,"tid":0,"args":{"instr":0}}]}`,
}

// clusterJSON is a valid two-device cluster spec with the field of edit replacing its own,
// or added (the optional fields).
func clusterJSON(edit string) string {
	fields := []string{`"name":"c"`, `"hosts":1`, `"devices_per_host":2`, `"device_flops":1e12`,
		`"device_memory_bytes":8589934592`, `"device_memory_bandwidth":1e11`, `"intra_host_bandwidth":1e10`,
		`"intra_host_latency":1e-6`, `"efficiency":1`}
	if edit != "" {
		key, _, _ := strings.Cut(edit, ":")
		replaced := false
		for i, f := range fields {
			if strings.HasPrefix(f, key+":") {
				fields[i], replaced = edit, true
			}
		}
		if !replaced {
			fields = append(fields, edit)
		}
	}
	return "{" + strings.Join(fields, ",") + "}"
}

type badInput struct {
	args string // the command line after "autopar"
	code int    // the exit status
	want string // a piece of stderr
}

func TestBadInputs(t *testing.T) {
	require.GreaterOrEqual(t, len(badInputs), 60)
	dir := badInputDir(t)
	models, err := filepath.Abs("../../testdata/models")
	require.NoError(t, err)
	expand := func(s string) string {
		return strings.NewReplacer("$D", dir, "$M", models, "$P", filepath.Join(filepath.Dir(models), "plans"),
			"$C", filepath.Join(filepath.Dir(models), "clusters")).Replace(s)
	}
	seen := map[string]bool{}
	for _, row := range badInputs {
		require.False(t, seen[row.args], "row %q twice", row.args)
		seen[row.args] = true
		t.Run(row.args, func(t *testing.T) {
			t.Parallel()
			args := splitArgs(expand(row.args))
			code, stderr := runAutopar(t, args)
			assert.Equal(t, row.code, code, "exit status; stderr:\n%s", stderr)
			assert.Contains(t, stderr, expand(row.want))
			assert.NotContains(t, stderr, "panic", "a panic is never a message")
			assert.NotContains(t, stderr, ".autopar-", "name the user's file, not a temporary one")
		})
	}
}

// runAutopar runs autopar with args in a process of its own and returns its exit status
// and stderr.
func runAutopar(t *testing.T, args []string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), mainEnv+"=1") // TestMain (exec_test.go) then runs main
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "autopar %s ran past a minute", strings.Join(args, " "))
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stderr.String()
}

// splitArgs splits a row's command line on blanks; 'single quotes' keep one argument
// together (and may be empty).
func splitArgs(s string) []string {
	var out []string
	var cur strings.Builder
	inArg, quoted := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, inArg = !quoted, true
		case r == ' ' && !quoted:
			if inArg {
				out = append(out, cur.String())
			}
			cur.Reset()
			inArg = false
		default:
			cur.WriteRune(r)
			inArg = true
		}
	}
	if inArg {
		out = append(out, cur.String())
	}
	return out
}

// badInputDir writes badFiles into a fresh t.TempDir(), with plan.json of the tiny MLP
// compiled for two CPU devices, a one-step runtime trace of it (trace.json) and that trace
// with data after it (trailing-trace.json).
func badInputDir(t *testing.T) string {
	dir := t.TempDir()
	for name, content := range badFiles {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	require.NoError(t, writeGoodPlan(dir))
	trace, err := os.ReadFile(filepath.Join(dir, "trace.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "trailing-trace.json"), append(trace, "{}"...), 0o644))
	return dir
}

// writeGoodPlan compiles mlp-tiny on cpu:2 into dir/plan.json and runs one step with a
// trace into dir/trace.json.
func writeGoodPlan(dir string) error {
	var out, errOut bytes.Buffer
	good := filepath.Join(dir, "good")
	f := compileFlags{cluster: "cpu:2", microbatches: "2", schedule: "1f1b", optimizer: "sgd", out: good}
	if err := runCompile(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f); err != nil {
		return fmt.Errorf("compiling the good plan: %w", err)
	}
	if err := os.Rename(filepath.Join(good, "plan.json"), filepath.Join(dir, "plan.json")); err != nil {
		return err
	}
	r := runFlags{compileFlags: f, steps: 1, seed: 1, timeout: time.Minute, tol: 1e-4, trace: filepath.Join(dir, "trace.json")}
	r.out = ""
	if err := runRun(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", r); err != nil {
		return fmt.Errorf("tracing the good plan: %w", err)
	}
	return nil
}

func TestSplitArgs(t *testing.T) {
	assert.Equal(t, []string{"a", "b c", "", "d"}, splitArgs(`a 'b c' '' d`))
	assert.Equal(t, []string{"x"}, splitArgs(` x `))
}
