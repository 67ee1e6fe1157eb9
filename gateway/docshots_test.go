package gateway_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// docShotSources are the files a screenshot in docs/ is a picture of.
var docShotSources = []string{"dashboard/index.html", "dashboard.go"}

// docShotsSum records, for each screenshot in docs/, the digest of the
// sources it was taken of.
const docShotsSum = "../docs/screenshots.sum"

var docShotsMu sync.Mutex

// docShot keeps docs/name, a screenshot the docs show, current. When the
// page's sources differ from those it was taken of, it copies shot (just
// taken by a browser test) there, records the sources' digest and fails,
// so that the new picture is committed with the page: the next run
// passes.
func docShot(t *testing.T, name, shot string) {
	t.Helper()
	docShotsMu.Lock()
	defer docShotsMu.Unlock()
	want := sourcesDigest(t)
	sums := readDocShotSums(t)
	if sums[name] == want {
		return
	}
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("../docs", name), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sums[name] = want
	var lines []string
	for n, s := range sums {
		lines = append(lines, n+" "+s)
	}
	slices.Sort(lines)
	if err := os.WriteFile(docShotsSum, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Errorf("docs/%s was taken of other sources than %v: regenerated it and docs/screenshots.sum; commit them", name, docShotSources)
}

// sourcesDigest returns the SHA-256 of docShotSources.
func sourcesDigest(t *testing.T) string {
	t.Helper()
	h := sha256.New()
	for _, f := range docShotSources {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// readDocShotSums reads docs/screenshots.sum: a name and a digest a line.
func readDocShotSums(t *testing.T) map[string]string {
	t.Helper()
	sums := map[string]string{}
	b, err := os.ReadFile(docShotsSum)
	if os.IsNotExist(err) {
		return sums
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if n, s, ok := strings.Cut(line, " "); ok {
			sums[n] = s
		}
	}
	return sums
}
