package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/tollgate/tollgate/policy"
)

// runtimeState is what admin changes make of a gateway beside its policy
// file, kept where every gateway of a fleet (or the next run of this one)
// finds it: in Redis with the Redis store, in a state file with the
// memory store.
type runtimeState struct {
	// Serial counts the changes: a gateway applies a state with a higher
	// one than it has.
	Serial    int64            `json:"serial"`
	Overrides policy.Overrides `json:"overrides"`
	// Pinned is the hash of the policy version a rollback made active
	// ("" when the file rules); RolledBack the hashes of the versions
	// rolled back from, which a reload of the same file leaves alone.
	Pinned     string   `json:"pinned,omitempty"`
	RolledBack []string `json:"rolled_back,omitempty"`
}

// errStateMoved is Save's answer when another gateway changed the state
// since it was read.
var errStateMoved = errors.New("the runtime state changed meanwhile (another gateway?); read it again and retry")

// errNotSaved wraps a change the backend could not store (Redis down, a
// read-only state file): it is not applied either.
var errNotSaved = errors.New("the change could not be saved")

// stateBackend keeps the runtime state.
type stateBackend interface {
	// Load returns the stored state (the zero state if none is).
	Load(ctx context.Context) (runtimeState, error)
	// Serial returns the stored state's serial (0 if none is), cheaply:
	// gateways poll it, and Load only when it moved.
	Serial(ctx context.Context) (int64, error)
	// Save stores st if the stored state's serial is st.Serial-1, and
	// reports errStateMoved if it is not.
	Save(ctx context.Context, st runtimeState) error
	String() string
}

// redisState keeps the state in one Redis key, and its serial in another
// (key + ":serial", in the same slot), saved together with a
// compare-and-set on the serial.
type redisState struct {
	client func() (rueidis.Client, error)
	key    string
}

var casState = rueidis.NewLuaScript(`
local serial = tonumber(redis.call('GET', KEYS[2]) or '0')
if serial ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[1] + 1)
return 1`)

func (r *redisState) serialKey() string { return r.key + ":serial" }

func (r *redisState) Serial(ctx context.Context) (int64, error) {
	c, err := r.client()
	if err != nil {
		return 0, fmt.Errorf("reading the runtime state: %w", err)
	}
	n, err := c.Do(ctx, c.B().Get().Key(r.serialKey()).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the runtime state: %w", err)
	}
	return n, nil
}

func (r *redisState) String() string { return "redis key " + r.key }

func (r *redisState) Load(ctx context.Context) (runtimeState, error) {
	var st runtimeState
	c, err := r.client()
	if err != nil {
		return st, fmt.Errorf("reading the runtime state: %w", err)
	}
	b, err := c.Do(ctx, c.B().Get().Key(r.key).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("reading the runtime state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("reading the runtime state: %w", err)
	}
	return st, nil
}

func (r *redisState) Save(ctx context.Context, st runtimeState) error {
	c, err := r.client()
	if err != nil {
		return fmt.Errorf("saving the runtime state: %w", err)
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	ok, err := casState.Exec(ctx, c, []string{r.key, r.serialKey()}, []string{fmt.Sprint(st.Serial - 1), string(b)}).AsInt64()
	if err != nil {
		return fmt.Errorf("saving the runtime state: %w", err)
	}
	if ok != 1 {
		return errStateMoved
	}
	return nil
}

// fileState keeps the state in a JSON file, replaced atomically.
type fileState struct {
	path string
	mu   sync.Mutex
}

func (f *fileState) String() string { return "file " + f.path }

func (f *fileState) Load(ctx context.Context) (runtimeState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.load()
}

func (f *fileState) load() (runtimeState, error) {
	var st runtimeState
	b, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("reading the runtime state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("reading the runtime state %s: %w", f.path, err)
	}
	return st, nil
}

func (f *fileState) Serial(ctx context.Context) (int64, error) {
	st, err := f.Load(ctx)
	return st.Serial, err
}

func (f *fileState) Save(ctx context.Context, st runtimeState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, err := f.load()
	if err != nil {
		return err
	}
	if cur.Serial != st.Serial-1 {
		return errStateMoved
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), ".tollgate-state-*")
	if err != nil {
		return fmt.Errorf("saving the runtime state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("saving the runtime state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("saving the runtime state: %w", err)
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		return fmt.Errorf("saving the runtime state: %w", err)
	}
	return nil
}

// saveState stores st where the fleet shares it (nothing to do without a
// backend) and makes it this gateway's. The caller holds g.mu.
func (g *Gateway) saveState(st runtimeState) error {
	if g.backend != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := g.backend.Save(ctx, st); err != nil {
			if errors.Is(err, errStateMoved) {
				go g.syncState(context.Background()) // catch up, then the admin retries
				return fmt.Errorf("saving the change in %s: %w", g.backend, err)
			}
			return fmt.Errorf("%w in %s: %w", errNotSaved, g.backend, err)
		}
	}
	g.state = st
	return nil
}

// statePoll is how often a gateway looks for changes other gateways made.
const statePoll = 300 * time.Millisecond

// syncState applies the stored state if it is newer than this gateway's:
// the overrides, and a rollback to a version this gateway has served (a
// version it never loaded cannot be rolled back to here; that is logged).
func (g *Gateway) syncState(ctx context.Context) error {
	if g.backend == nil {
		return nil
	}
	serial, err := g.backend.Serial(ctx)
	if err != nil {
		return err
	}
	g.mu.Lock()
	seen := g.state.Serial
	g.mu.Unlock()
	if serial <= seen {
		return nil
	}
	st, err := g.backend.Load(ctx)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if st.Serial <= g.state.Serial {
		return nil
	}
	return g.applyState(st)
}

// applyState makes st this gateway's. The caller holds g.mu.
func (g *Gateway) applyState(st runtimeState) error {
	old := g.overrides
	g.overrides = st.Overrides
	active := g.active.Load()
	target, keep := active.base, len(g.history)
	if st.Pinned != "" && st.Pinned != active.base.Hash {
		keep = -1
		for i := len(g.history) - 1; i >= 0; i-- {
			if g.history[i].base.Hash == st.Pinned {
				target, keep = g.history[i].base, i
				break
			}
		}
		if keep < 0 {
			g.log.Warn("the fleet rolled back to a policy version this gateway never served; serving its own",
				slog.String("hash", st.Pinned), slog.String("active_hash", active.base.Hash))
			target, keep = active.base, len(g.history)
		}
	}
	// Overrides that do not fit the version served here stay in the
	// state; build leaves them out (see build).
	sv, err := g.build(target)
	if err != nil {
		g.overrides = old
		g.log.Error("applying the fleet's runtime state", slog.String("error", err.Error()))
		return err
	}
	if target != active.base {
		g.history = g.history[:keep]
		g.swap(sv, false)
		g.reloads.WithLabelValues("rollback").Inc()
	} else {
		g.active.Store(sv)
	}
	g.state = st
	g.log.Info("runtime state applied", slog.Int64("serial", st.Serial), slog.Int("keys", len(st.Overrides.Keys)),
		slog.Int("tenants", len(st.Overrides.Tenants)), slog.String("pinned", st.Pinned))
	return nil
}

// watchState applies other gateways' changes until ctx ends.
func (g *Gateway) watchState(ctx context.Context) {
	if g.backend == nil {
		return
	}
	t := time.NewTicker(statePoll)
	defer t.Stop()
	for {
		if err := g.syncState(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("reading the runtime state", slog.String("from", g.backend.String()), slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
