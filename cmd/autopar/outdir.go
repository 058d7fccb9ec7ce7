package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/autopar/autopar"
)

// An output directory (compile -o DIR) belongs to autopar as a whole: it holds plan.json
// and, with --emit programs, programs/deviceN.txt and programs/deviceN.json, and nothing
// else. It changes as a whole: the new contents are written into a temporary directory
// beside DIR, which then takes DIR's place in one rename, so a run that is killed or
// interrupted leaves the old DIR (or none) and never a mixture, and files of an earlier
// compile for more devices do not linger. DIR may be absent, empty, or hold only what
// autopar writes there; a DIR holding anything else (the user's notes, a model) is refused,
// never deleted.

// planFile is the plan's name in an output directory, programsDir the programs' folder.
const (
	planFile    = "plan.json"
	programsDir = "programs"
)

// programFile matches the files of programsDir.
var programFile = regexp.MustCompile(`^device[0-9]+\.(txt|json)$`)

// checkEmit validates --emit before any work is done.
func checkEmit(emit, out string) error {
	switch {
	case emit != "" && emit != "programs":
		return fmt.Errorf("--emit %q: expected programs", emit)
	case emit != "" && out == "":
		return fmt.Errorf("--emit %s writes files into the output directory: give -o DIR", emit)
	}
	return nil
}

// checkOutputDir reports whether dir may be replaced: it is absent, or a directory holding
// only autopar's files. It is run before compiling, so that a long search does not end in
// a refusal, and again just before the replacement.
func checkOutputDir(dir string) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("-o %s: %w", dir, errors.Unwrap(err))
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("-o %s: a symbolic link; autopar replaces its output directory whole, so give the directory it points to", dir)
	case !fi.IsDir():
		return fmt.Errorf("-o %s: not a directory; autopar writes a directory holding %s and %s/", dir, planFile, programsDir)
	}
	foreign, err := foreignFiles(dir)
	if err != nil {
		return err
	}
	if len(foreign) > 0 {
		if len(foreign) > 3 {
			foreign = append(foreign[:3], fmt.Sprintf("and %d more", len(foreign)-3))
		}
		return fmt.Errorf("-o %s: the directory holds files autopar did not write (%s); autopar replaces its output "+
			"directory whole, so give a new or empty directory, or one holding only %s and %s/",
			dir, strings.Join(foreign, ", "), planFile, programsDir)
	}
	return nil
}

// foreignFiles lists, relative to dir, the entries that are not autopar's.
func foreignFiles(dir string) ([]string, error) {
	var foreign []string
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("-o %s: %w", dir, errors.Unwrap(err))
	}
	for _, e := range entries {
		switch {
		case e.Name() == planFile && e.Type().IsRegular():
		case e.Name() == programsDir && e.IsDir():
			progs, err := os.ReadDir(filepath.Join(dir, programsDir))
			if err != nil {
				return nil, fmt.Errorf("-o %s: %w", dir, errors.Unwrap(err))
			}
			for _, p := range progs {
				if !p.Type().IsRegular() || !programFile.MatchString(p.Name()) {
					foreign = append(foreign, filepath.Join(programsDir, p.Name()))
				}
			}
		default:
			foreign = append(foreign, e.Name())
		}
	}
	sort.Strings(foreign)
	return foreign, nil
}

// writePlanDir replaces dir with a directory holding plan.json and, when programs is set,
// the programs of every device. Nothing changes in dir unless every file was written; a
// cancelled ctx stops it (codegen included) and leaves dir as it was. Errors name dir, never
// the temporary directory.
func writePlanDir(ctx context.Context, dir string, plan *autopar.Plan, programs bool) error {
	if err := checkOutputDir(dir); err != nil {
		return err
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("-o %s: %w", dir, errors.Unwrap(err))
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".autopar-*")
	if err != nil {
		return fmt.Errorf("-o %s: %w", dir, errors.Unwrap(err))
	}
	defer os.RemoveAll(tmp) // after the swap it holds the old contents
	if err := fillPlanDir(ctx, tmp, plan, programs); err != nil {
		return userPath(err, tmp, dir)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it 0700
		return userPath(err, tmp, dir)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkOutputDir(dir); err != nil { // the user may have added a file meanwhile
		return err
	}
	return userPath(replaceDir(tmp, filepath.Clean(dir)), tmp, dir)
}

// fillPlanDir writes the files of an output directory into the empty directory dir.
func fillPlanDir(ctx context.Context, dir string, plan *autopar.Plan, programs bool) error {
	if programs {
		progs, err := interruptible(ctx, plan.Programs)
		if err != nil {
			return err
		}
		pdir := filepath.Join(dir, programsDir)
		if err := os.Mkdir(pdir, 0o755); err != nil {
			return err
		}
		for _, p := range progs {
			if err := ctx.Err(); err != nil {
				return err
			}
			base := filepath.Join(pdir, fmt.Sprintf("device%d", p.Device))
			if err := writeFile(base+".txt", func(w io.Writer) error { _, err := io.WriteString(w, p.String()); return err }); err != nil {
				return err
			}
			if err := writeFile(base+".json", func(w io.Writer) error {
				data, err := p.MarshalJSON()
				if err == nil {
					_, err = w.Write(data)
				}
				return err
			}); err != nil {
				return err
			}
		}
	}
	return writeFile(filepath.Join(dir, planFile), plan.WriteJSON)
}

// writeFile creates path and writes it through a buffer.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := write(w); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// replaceDir puts directory tmp in dir's place. When dir exists the two are exchanged
// (atomically where the system can, see exchangeDirs) and tmp then holds the old contents,
// for the caller to remove.
func replaceDir(tmp, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return os.Rename(tmp, dir)
	}
	return exchangeDirs(tmp, dir)
}

// renameExchange swaps two directories with two renames through a third name, undoing
// the first when the second fails. A kill between them leaves dir absent and its old
// contents under the third name: the fallback where no atomic exchange exists.
func renameExchange(tmp, dir string) error {
	old := tmp + ".old"
	if err := os.Rename(dir, old); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.Rename(old, dir)
		return err
	}
	return os.Rename(old, tmp)
}

// userPath rewrites the paths of a file error under the temporary directory tmp to the
// same path under the user's dir, so that messages name what the user asked for.
func userPath(err error, tmp, dir string) error {
	if err == nil {
		return nil
	}
	fix := func(p string) string {
		for _, t := range []string{tmp + ".old", tmp} {
			if rest, ok := strings.CutPrefix(p, t); ok {
				return filepath.Join(dir, rest)
			}
		}
		return p
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: fix(pe.Path), Err: pe.Err}
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return &fs.PathError{Op: "replace", Path: dir, Err: le.Err}
	}
	return err
}

// interruptible runs f, which does not take a context (codegen), and returns early with
// ctx's error when ctx ends first. f then runs on to its end on its own goroutine and its
// result is dropped: meant for a command that exits once it returns.
func interruptible[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
