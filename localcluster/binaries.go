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
// if given; else next to the running executable; else on PATH; else it
// builds them with `go build` from the source tree it runs in (found from
// the working directory upwards) into that tree's bin/ directory.
func FindBinaries(ctx context.Context, dir string) (coordinator, scanserver string, err error) {
	names := []string{"coordinator", "scanserver"}
	if dir != "" {
		return pair(dir, names)
	}
	if exe, err := os.Executable(); err == nil {
		if c, s, err := pair(filepath.Dir(exe), names); err == nil {
			return c, s, nil
		}
	}
	if c, err1 := exec.LookPath(names[0]); err1 == nil {
		if s, err2 := exec.LookPath(names[1]); err2 == nil {
			return c, s, nil
		}
	}
	bin, err := BuildFromSource(ctx)
	if err != nil {
		return "", "", fmt.Errorf("localcluster: no coordinator/scanserver executables next to this program or on PATH, and %w", err)
	}
	return pair(bin, names)
}

// FindTool locates another scanplane command (e.g. "loadtest") like
// FindBinaries: next to the running executable, else on PATH, else built
// from the source tree into its bin/ directory.
func FindTool(ctx context.Context, name string) (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	root, err := SourceRoot()
	if err != nil {
		return "", fmt.Errorf("localcluster: no %s executable next to this program or on PATH, and %w", name, err)
	}
	bin := filepath.Join(root, "bin")
	if err := build(ctx, root, bin, name); err != nil {
		return "", err
	}
	return filepath.Join(bin, name), nil
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

func pair(dir string, names []string) (string, string, error) {
	var out [2]string
	for i, n := range names {
		p := filepath.Join(dir, n)
		st, err := os.Stat(p)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", "", fmt.Errorf("localcluster: no executable %s", p)
		}
		out[i] = p
	}
	return out[0], out[1], nil
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
