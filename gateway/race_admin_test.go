package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate/tollgate/policy"
)

// TestOverridesReloadsRollbacksRace: admin overrides, file reloads,
// rollbacks and requests at once: no data race, and at the end the
// overrides made are all in force over the last file.
func TestOverridesReloadsRollbacksRace(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	var mu sync.Mutex
	write := func(i int) {
		mu.Lock()
		defer mu.Unlock()
		src := strings.NewReplacer("VERSION", fmt.Sprint("v", i), "LIMIT", fmt.Sprint(1000+i%3), "UPSTREAM", up.URL).Replace(reloadPolicy)
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(src), 0o600); err != nil {
			t.Error(err)
		}
		os.Rename(tmp, path)
	}
	write(0)
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, p, "")
	watch(t, g, path)
	var wg sync.WaitGroup
	wg.Add(4)
	go func() {
		defer wg.Done()
		for i := 1; i <= 30; i++ {
			write(i)
			g.g.ReloadFile(path)
		}
	}()
	go func() {
		defer wg.Done()
		for i := range 30 {
			g.g.Rollback()
			_ = i
		}
	}()
	go func() {
		defer wg.Done()
		for i := range 30 {
			if err := g.g.Override(policy.Overrides{Tenants: map[string]string{fmt.Sprint("t", i): "open"}}); err != nil {
				t.Errorf("override %d: %v", i, err)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for range 60 {
			get(t, g.public+"/api/x")
			getBody(t, g.admin+"/policy")
			getBody(t, g.admin+"/overrides")
			getBody(t, g.admin+"/dashboard/data")
		}
	}()
	wg.Wait()
	for i := range 30 {
		if g.g.Policy().TenantPlans[fmt.Sprint("t", i)] == nil {
			t.Errorf("tenant t%d's override is not in force", i)
		}
	}
}
