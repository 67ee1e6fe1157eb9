// Package configmap lays files out in a directory as the kubelet mounts a
// Kubernetes ConfigMap (or a Secret) as a volume, and updates them as it
// does, for the tests of what watches such a directory.
//
// The layout: each file is a symlink, name -> ..data/name; ..data is a
// symlink to a directory named for the time of the update
// (..2026_12_01_10_00_00.123456789) that holds the files. An update
// writes a new such directory, points a new symlink, ..data_tmp, at it
// and renames that over ..data: the one atomic step. A mount with subPath
// is not laid out so, and never updated: it is not modelled here.
package configmap

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

const (
	dataDir    = "..data"
	newDataDir = "..data_tmp"
)

// A Volume is a directory laid out as the kubelet lays out a ConfigMap's
// volume.
type Volume struct {
	// Dir is the directory the volume is mounted on.
	Dir   string
	files map[string]bool // the names shown
}

// Mount lays files (name to content) out in dir, which must exist and
// be empty, as the kubelet mounts a ConfigMap holding them.
func Mount(t testing.TB, dir string, files map[string]string) *Volume {
	t.Helper()
	v := &Volume{Dir: dir, files: map[string]bool{}}
	v.Update(t, files)
	return v
}

// Update makes files the volume's content as the kubelet's atomic writer
// does: the files in a new timestamped directory, a symlink made for each
// name new to the volume, ..data_tmp pointing at the new directory
// renamed over ..data, the names no longer there removed, and then the
// directory ..data pointed at before.
func (v *Volume) Update(t testing.TB, files map[string]string) {
	t.Helper()
	old, _ := os.Readlink(filepath.Join(v.Dir, dataDir)) // "" at the first
	ts, err := os.MkdirTemp(v.Dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if !v.files[name] {
			if err := os.Symlink(filepath.Join(dataDir, name), filepath.Join(v.Dir, name)); err != nil {
				t.Fatal(err)
			}
			v.files[name] = true
		}
	}
	tmp := filepath.Join(v.Dir, newDataDir)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, dataDir)); err != nil {
		t.Fatal(err)
	}
	for name := range v.files {
		if _, kept := files[name]; !kept {
			if err := os.Remove(filepath.Join(v.Dir, name)); err != nil {
				t.Fatal(err)
			}
			delete(v.files, name)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.Dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}
