package autopar

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/autopar/autopar/runtime/kernels"
	"github.com/autopar/autopar/safetensors"
)

// CheckpointFormat names the checkpoint layout in the file's metadata.
const CheckpointFormat = "autopar-checkpoint/1"

// Checkpoint is a saved training state: the full (unsharded) params and optimizer state by
// name, and what they belong to. It does not depend on the plan it was saved under.
type Checkpoint struct {
	Model     string
	ModelHash string
	Step      int
	Optimizer OptimizerSpec
	Tensors   map[string]*kernels.Tensor
}

// Save writes the trainer's params and optimizer state, whole, with the model's hash, the
// step count and the optimizer, to path in safetensors format. The file is written under a
// temporary name and renamed into place, so path holds the old checkpoint or the new one,
// never part of one.
//
// In a group (TrainerOptions.Group) every process must call it; the lead writes the file.
func (t *Trainer) Save(path string) error {
	all, err := t.sess.Gather(context.Background())
	if err != nil {
		return err
	}
	if !t.sess.Lead() {
		return nil
	}
	opt, err := json.Marshal(t.plan.Optimizer)
	if err != nil {
		return err
	}
	meta := map[string]string{
		"format":     CheckpointFormat,
		"model":      t.plan.Model,
		"model_hash": t.plan.ModelHash,
		"step":       strconv.Itoa(t.step),
		"optimizer":  string(opt),
		"checksum":   safetensors.Checksum(all),
	}
	if err := safetensors.WriteFile(path, all, meta); err != nil {
		return fmt.Errorf("trainer: save %s: %w", path, err)
	}
	return nil
}

// LoadCheckpoint reads a checkpoint Save wrote. A file that is not one (no autopar
// metadata), is truncated, or whose tensors do not match their checksum is an error naming
// the file.
func LoadCheckpoint(path string) (*Checkpoint, error) {
	tensors, meta, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint: %s: %s", path, fmt.Sprintf(format, args...))
	}
	if meta["format"] != CheckpointFormat {
		return nil, bad("metadata format is %q, expected %q: not an autopar checkpoint", meta["format"], CheckpointFormat)
	}
	ck := &Checkpoint{Model: meta["model"], ModelHash: meta["model_hash"], Tensors: tensors}
	if ck.Step, err = strconv.Atoi(meta["step"]); err != nil || ck.Step < 0 {
		return nil, bad("metadata step is %q, expected a count of steps", meta["step"])
	}
	if err := json.Unmarshal([]byte(meta["optimizer"]), &ck.Optimizer); err != nil {
		return nil, bad("metadata optimizer is %q, expected the plan's optimizer in JSON", meta["optimizer"])
	}
	if sum := safetensors.Checksum(tensors); sum != meta["checksum"] {
		return nil, bad("the tensors' checksum is %.12s, the metadata says %.12s: the file is corrupt", sum, meta["checksum"])
	}
	return ck, nil
}

// fits checks that the checkpoint belongs to plan's model and optimizer and holds exactly
// the tensors of state (the step's params and optimizer state), with their types.
func (ck *Checkpoint) fits(plan *Plan, state map[string]*kernels.Tensor) error {
	if ck.ModelHash != plan.ModelHash {
		return fmt.Errorf("checkpoint: it belongs to model %s (hash %.12s), not to the plan's %s (hash %.12s)",
			ck.Model, ck.ModelHash, plan.Model, plan.ModelHash)
	}
	if ck.Optimizer != plan.Optimizer {
		return fmt.Errorf("checkpoint: it was trained with optimizer %+v, the plan's is %+v: compile the plan with the checkpoint's optimizer",
			ck.Optimizer, plan.Optimizer)
	}
	for _, name := range slices.Sorted(maps.Keys(state)) {
		x, ok := ck.Tensors[name]
		if !ok {
			return fmt.Errorf("checkpoint: it has no tensor %s, expected %s", name, state[name].Type)
		}
		if !x.Type.Equal(state[name].Type) {
			return fmt.Errorf("checkpoint: tensor %s is %s, expected %s", name, x.Type, state[name].Type)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ck.Tensors)) {
		if _, ok := state[name]; !ok {
			return fmt.Errorf("checkpoint: tensor %s is not a param or state of model %s", name, plan.Model)
		}
	}
	return nil
}
