package localcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const modulePath = "github.com/scanplane/scanplane"

// FindBinaries locates the coordinator and scanserver executables: in dir
// if given; else as FindTools does.
func FindBinaries(ctx context.Context, dir string) (coordinator, scanserver string, err error) {
	names := []string{"coordinator", "scanserver"}
	var paths []string
	if dir != "" {
		paths, err = inDir(dir, names)
	} else {
		paths, err = FindTools(ctx, names...)
	}
	if err != nil {
		return "", "", err
	}
	return paths[0], paths[1], nil
}

// FindTool locates one scanplane command (e.g. "loadtest"); see FindTools.
func FindTool(ctx context.Context, name string) (string, error) {
	paths, err := FindTools(ctx, name)
	if err != nil {
		return "", err
	}
	return paths[0], nil
}

// FindTools locates scanplane commands, all from one place: next to the
// running executable; else on PATH; else built with `go build` (one
// build for all of them) from the source tree the working directory is in,
// into that tree's bin/ directory.
func FindTools(ctx context.Context, names ...string) ([]string, error) {
	if exe, err := os.Executable(); err == nil {
		if paths, err := inDir(filepath.Dir(exe), names); err == nil {
			return paths, nil
		}
	}
	if paths, err := onPath(names); err == nil {
		return paths, nil
	}
	root, err := SourceRoot()
	if err != nil {
		return nil, fmt.Errorf("localcluster: no %s executables next to this program or on PATH, and %w", strings.Join(names, "/"), err)
	}
	bin := filepath.Join(root, "bin")
	if err := build(ctx, root, bin, names...); err != nil {
		return nil, err
	}
	return inDir(bin, names)
}

// BuildFromSource builds the coordinator and scanserver of the source tree
// containing the working directory into its bin/ directory (incremental:
// Go's build cache makes a rebuild of unchanged code fast) and returns
// that directory.
func BuildFromSource(ctx context.Context) (string, error) {
	root, err := SourceRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, "bin")
	return bin, Build(ctx, root, bin)
}

// inDir returns dir/name for every name, or an error if one is not an
// executable file.
func inDir(dir string, names []string) ([]string, error) {
	out := make([]string, len(names))
	for i, n := range names {
		p := filepath.Join(dir, n)
		st, err := os.Stat(p)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("localcluster: no executable %s", p)
		}
		out[i] = p
	}
	return out, nil
}

func onPath(names []string) ([]string, error) {
	out := make([]string, len(names))
	for i, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// SourceRoot finds the scanplane source tree from the working directory
// upwards.
func SourceRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isModuleRoot(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("the working directory is not inside the scanplane source tree")
		}
		dir = parent
	}
}

func isModuleRoot(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := strings.TrimSpace(s.Text()); strings.HasPrefix(line, "module ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "module ")) == modulePath
		}
	}
	return false
}

// Build compiles the coordinator and scanserver commands of the source tree
// at root into dir. Executables are built aside and renamed into place, so
// concurrent builds (parallel test packages) and running processes never
// see a half-written file.
func Build(ctx context.Context, root, dir string) error {
	return build(ctx, root, dir, "coordinator", "scanserver")
}

func build(ctx context.Context, root, dir string, names ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	args := []string{"build", "-o", tmp + string(filepath.Separator)}
	for _, n := range names {
		args = append(args, "./cmd/"+n)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("localcluster: go build in %s: %v\n%s", root, err, out)
	}
	for _, n := range names {
		if err := os.Rename(filepath.Join(tmp, n), filepath.Join(dir, n)); err != nil {
			return err
		}
	}
	return nil
}
