package member

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// formationFile, in -b beside the log's segments (which the log alone
// reads), records the G and R a cluster of several groups was formed
// with, once the member has started with them: its log holds only the
// groups placed on it, which cannot tell how many there are, so a
// restart without --cluster-groups takes them from here.
const formationFile = "cluster-groups.json"

// formation is what formationFile holds.
type formation struct {
	Groups   int `json:"groups"`
	Replicas int `json:"replicas"`
}

// readFormation reads dir's formationFile; none is the zero formation.
func readFormation(dir string) (formation, error) {
	var f formation
	b, err := os.ReadFile(filepath.Join(dir, formationFile))
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err == nil && (f.Groups < 1 || f.Replicas < 1) {
		err = fmt.Errorf("groups %d, replicas %d", f.Groups, f.Replicas)
	}
	if err != nil {
		return formation{}, fmt.Errorf("member: %s: %w", filepath.Join(dir, formationFile), err)
	}
	return f, nil
}

// writeFormation writes dir's formationFile durably: a new file renamed
// into place, the directory synced.
func writeFormation(dir string, f formation) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, formationFile)
	tmp, err := os.CreateTemp(dir, formationFile+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("member: writing %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
