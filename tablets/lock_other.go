//go:build !unix

package tablets

// lockFile is a no-op where flock is unavailable: DirMetaStore's
// compare-and-swap is then safe within one process only (its mutex).
func lockFile(string) (func(), error) { return func() {}, nil }
