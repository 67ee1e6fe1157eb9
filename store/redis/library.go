package redis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// A library is decide.lua, multi.lua, reserve.lua, place.lua and settle.lua as a Redis function library: its definitions
// made once, when the library is loaded, instead of on every EVALSHA, which
// is most of what a lone decision costs Redis. Its name holds a hash of its
// source, so gateways of different versions load libraries side by side.
// It is loaded on first use, and again whenever a server answers that it
// has no such function (a restart, a flush, a new Cluster node); a server
// that cannot load it (no FUNCTION command, no permission) makes the store
// fall back to scripts for good.
type library struct {
	name, src              string
	decide, multi, reserve string // the functions of decide.lua, multi.lua and reserve.lua
	place                  string // the function of place.lua
	settle, settleMany     string // the functions of settle.lua: one reservation, or several coalesced
	one                    string // decide.lua's decide_one: a lone request on Redis' clock
	refused                atomic.Bool
	mu                     sync.Mutex // one load at a time
}

// newLibrary returns the library of decide.lua, multi.lua, reserve.lua, place.lua and settle.lua.
func newLibrary() (*library, error) {
	defs, err := definitions("decide.lua", "multi.lua", "reserve.lua", "place.lua", "settle.lua")
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(defs))
	tag := hex.EncodeToString(sum[:6])
	l := &library{name: "tollgate_" + tag, decide: "tollgate_decide_" + tag, multi: "tollgate_multi_" + tag, reserve: "tollgate_reserve_" + tag,
		place: "tollgate_place_" + tag, settle: "tollgate_settle_" + tag, settleMany: "tollgate_settle_many_" + tag, one: "tollgate_one_" + tag}
	register := func(fn, entry string) string {
		return "redis.register_function('" + fn + "', function(keys, args) begin(keys, args, true) reset() return " + entry + "() end)\n"
	}
	l.src = "#!lua name=" + l.name + "\n" + defs + register(l.decide, "decide_all") + register(l.multi, "multi_all") +
		register(l.reserve, "reserve_one") + register(l.place, "place_op") + register(l.settle, "settle_all") +
		register(l.settleMany, "settle_many") +
		"redis.register_function('" + l.one + "', function(keys, args) return decide_one(keys, args) end)\n"
	return l, nil
}

// call calls the library's function fn with FCALL, loading the library if
// the server lacks it; ok is false if the library cannot be used, and then
// the caller runs the script instead.
func (l *library) call(ctx context.Context, c rueidis.Client, fn string, keys, args []string) (res rueidis.RedisResult, ok bool) {
	if l.refused.Load() {
		return res, false
	}
	cmd := func() rueidis.RedisResult {
		return c.Do(ctx, c.B().Fcall().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	res = cmd()
	if err := res.Error(); err == nil || !strings.Contains(err.Error(), "Function not found") {
		return res, true
	}
	// A load is a one-off that must not fail for lack of one request's
	// time: it runs to its own deadline.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), libraryLoadTimeout)
	defer cancel()
	if !l.load(lctx, c) {
		return res, false
	}
	return cmd(), true
}

// libraryLoadTimeout bounds one load of the library.
const libraryLoadTimeout = 5 * time.Second

// load loads the library into every master c reaches and reports whether
// it may be used.
func (l *library) load(ctx context.Context, c rueidis.Client) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused.Load() {
		return false
	}
	nodes := map[string]rueidis.Client{"": c}
	if c.Mode() == rueidis.ClientModeCluster {
		nodes = c.Nodes()
	}
	loaded := false
	for _, n := range nodes {
		err := n.Do(ctx, n.B().FunctionLoad().Replace().FunctionCode(l.src).Build()).Error()
		re, isReply := rueidis.IsRedisErr(err)
		switch {
		case err == nil:
			loaded = true
		case !isReply:
			// The node did not answer (a timeout, a lost connection):
			// try again next time.
		case strings.Contains(re.Error(), "READONLY"):
			// A replica: it gets the library from its master.
		default:
			// No FUNCTION command, no permission, or a library this
			// server cannot load: scripts from now on, rather than a
			// failed load on every call.
			l.refused.Store(true)
			return false
		}
	}
	return loaded
}
