// Package readyfile is the --ready-file of the coordinator and the
// scanserver: the JSON a process writes once it serves, naming where it
// listens, which whoever started it (localcluster, tests) waits for.
package readyfile

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// Ready is what the coordinator and scanserver write to --ready-file.
type Ready struct {
	NATS        string   `json:"nats,omitempty"`
	Actor       string   `json:"actor,omitempty"`
	HTTP        string   `json:"http,omitempty"`
	Host        string   `json:"host,omitempty"`
	Servers     []string `json:"servers,omitempty"`
	PID         int      `json:"pid"`
	Incarnation string   `json:"incarnation,omitempty"`
}

// Write atomically writes r as JSON to path (through a temporary file
// in its directory and a rename); path "" writes nothing.
func Write(path string, r Ready) error {
	if path == "" {
		return nil
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
