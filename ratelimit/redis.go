package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goodput/goodput/internal/urlredact"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisOptions are settings of the Redis backend that are not in the
// configuration file.
type redisOptions struct {
	// ClientTime makes the scripts use the `now` passed to Admit and
	// Reconcile instead of the Redis server's clock. It exists for tests and
	// simulations that drive time; in production the server's clock keeps
	// replicas with skewed clocks consistent. false = server clock.
	ClientTime bool
	// LeaseRefresh is how often the heartbeat renews the concurrency leases
	// of live requests (and releases again those whose release failed).
	// 0 = LeaseTTL/5; negative = never (leases then last LeaseTTL).
	LeaseRefresh time.Duration
	// Logf receives one line when Redis starts failing, one when it
	// answers again (not one per failed call), and in between one for each
	// new kind of error, up to 4 (see noteCause); outages that follow one
	// another within flapWindow are counted instead. nil = no log.
	Logf func(format string, args ...any)
	// RecoveryProbe is how often a replacement connection is tried while
	// Redis cannot be reached. 0 = 100ms.
	RecoveryProbe time.Duration
	// Probed receives the outcome of each recovery probe that reached
	// Redis (nil: Redis took its write, and the breaker is closed), for
	// tests to wait on. nil = none.
	Probed func(err error)
}

// Redis is the shared backend: every limit is a key in Redis, decided by one
// Lua script per request (one round trip; see admitScript) on GCRA buckets,
// and concurrency is held as leases that expire, so that a crashed replica's
// slots free themselves.
//
// Every call is bounded by the configured timeout (default 250ms). When Redis
// fails, on_backend_error decides: fail_open admits the request (its tokens are
// still charged at Reconcile if Redis is back by then), fail_closed rejects it
// with a 503-style decision; the error is returned so that it is counted. The
// client does not retry, dials once per attempt, and when connections keep
// failing a probe replaces the whole client as soon as Redis takes a write
// again (every 100ms by default), instead of waiting for go-redis's own
// one-second dial back-off.
//
// A level (tenant, key, model: the names of its keys in Redis and the
// script's arguments for its limits) is made at its first decision, under
// its tenant's mutex, and kept until the next reload, only for a key or a
// model the tenant lists with limits (a client names any model, a new one at
// every request if it likes; one not listed counts at the tenant's level and
// makes none): a tenant that sends nothing, or a model it never asks for,
// costs no level (a platform's 20,000 tenants with 25 per-model limits
// each held 173 MB of them before any request, built again at every
// reload). A level holds no state, which
// is in Redis: a reload lets every level go, and the next decision makes
// it again with the new limits.
type Redis struct {
	failOpen  bool
	timeout   time.Duration
	leaseTTL  time.Duration
	prefix    string
	opts      redisOptions
	newClient func() redis.UniversalClient
	probe     func(ctx context.Context) error // dials Redis without a client

	client     atomic.Pointer[clientBox]
	nopermSaid atomic.Bool // the probe's write was refused by the ACL, and the log said so
	addrs      []string

	// breaker is the outage state of the server, or of a Redis Cluster
	// while its masters cannot be told apart; nodes holds a breaker per
	// Redis Cluster master (address → *breaker), made at its first call.
	breaker
	nodes sync.Map

	mu    sync.Mutex // serialises SetTenants
	state atomic.Pointer[redisState]

	replica string
	seq     atomic.Uint64

	cluster bool
	lastNow atomic.Int64 // ClientTime: the latest time passed in (µs)
	now     func() time.Time
	// since is the time since the backend was made, on the monotonic
	// clock, which no step of the wall clock moves (the breaker's spans).
	since func() time.Duration

	leaseMu      sync.Mutex
	leases       map[*redisTicket]struct{} // live requests holding a lease
	stale        []staleLease              // leases to release (again) at the next heartbeat
	fixes        []tokenFix                // token corrections to make (again) at the next heartbeat
	fixesDropped int                       // corrections dropped (maxFixes, fixMaxAge) not logged yet
	dropSaid     time.Duration             // Redis.since at the last line that said so
	beating      int                       // heartbeats in flight (several on a Redis Cluster: a master's probe runs one)
	kick         chan struct{}             // wakes the heartbeat at once (an outage ended)

	life   sync.Mutex // guards closed and wg.Add against Close
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

type clientBox struct{ c redis.UniversalClient }

// staleLease is a released lease that may still be in Redis: its release
// failed (Redis out of reach), or a heartbeat in flight may have renewed it.
type staleLease struct {
	keys   []string // concurrency keys
	lease  string
	at     time.Time // released at
	failed bool      // its release failed (not one the heartbeat in flight may renew)
}

// tokenFix is a request's token correction (Reconcile) that surely did not
// run (notSent): the heartbeat sends it again until Redis takes it, for at
// most fixMaxAge.
type tokenFix struct {
	keys  []string // token keys
	args  []any    // kind, T, capacity per key
	delta int64
	at    time.Duration // Redis.since at the request's end
}

// notSent reports whether a call that failed with err surely did not run:
// not asked (the breaker open), no connection (a dial failed, or none free
// in time). Any other failure (a timeout, a reset connection) may come
// after Redis ran it, its reply lost or late: a correction sent again then
// could be made twice, which is worse than not at all (a refund made twice
// lets the tenant past its limit; a charge made twice refuses it); one made
// at most once needs no mark in Redis (an id kept per request, tried, cost
// about 140 bytes of Redis's memory for two minutes and 10 µs of its time
// per request).
func notSent(err error) bool {
	return err != nil && (errors.Is(err, errBreakerOpen) || isDial(err) || errors.Is(err, redis.ErrPoolTimeout))
}

// mayHaveRun reports whether a call that failed with err may have run all
// the same: neither surely not sent (notSent), nor refused by Redis (an
// error reply: the script did nothing), nor run too late (errTooLate:
// nothing charged).
func mayHaveRun(err error) bool {
	var reply redis.Error
	return err != nil && !notSent(err) && !errors.Is(err, errTooLate) && !errors.As(err, &reply)
}

// fixMaxAge is how long a token correction is sent again: a minute, the
// period of the token buckets. A refund later than that finds its bucket
// full again, or nearly; a charge later than that would weigh on requests
// that came after the minute it belonged to.
const fixMaxAge = time.Minute

// maxFixes bounds the corrections kept for the heartbeat (an outage under
// a heavy load ends thousands of requests): past it the oldest go.
const maxFixes = 100_000

type redisState struct {
	tenants map[string]*redisTenant
}

// redisTenant is a tenant's configured limits and the levels (tenant, key,
// model) made for them: a level is made at its first decision and kept
// until the next reload, which makes a new redisTenant (see SetTenants).
type redisTenant struct {
	name     string
	cut      bool // on_overrun: cut
	lim      Limits
	keyLim   map[string]Limits // only keys that have limits; nil: none
	modelLim map[string]Limits // TenantConfig.Models, only read; a zero entry is no limit

	mu     sync.Mutex  // guards names and the levels below, made under it
	names  modelNames  // matches a request's model to one of modelLim
	top    *redisLevel // nil until the tenant's first decision
	keys   map[string]*redisLevel
	models map[string]*redisLevel
}

// redisLevel is the script's keys and arguments for a level's limits. It
// holds no state (that is in Redis, under its keys) and is not changed once
// made.
type redisLevel struct {
	scope                  Scope
	lim                    Limits
	reqKey, tokKey, cckKey string // "" when the level has no such limit
	reqT, reqCap           string
	tokT, tokCap           string
	maxConc                string
}

type redisTicket struct {
	est   int64
	lease string
	keys  []string // token keys charged at admission, then concurrency keys
	args  []any    // kind, T, capacity per key
	ntok  int      // how many of keys are token keys

	// Charges of a stream that outgrows est (Gate.Progress): the reader adds
	// to pending and one goroutine at a time sends it (growing); Reconcile
	// sets settled, which ends them, and reads extra.
	pending atomic.Int64 // asked for, not yet sent
	at      atomic.Int64 // the time of the latest chunk asked for (µs), for ClientTime
	growing atomic.Bool
	cut     atomic.Bool // a chunk was refused under on_overrun: cut
	mu      sync.Mutex  // held by a charge in flight, and by Reconcile
	extra   int64       // charged by the chunks Redis took
	settled bool
}

// limitRef ties one script key to what it means.
type limitRef struct {
	lv   *redisLevel
	kind byte // 'r', 't', 'c'
}

var _ Limiter = (*Redis)(nil)

// newRedis connects the Redis backend described by cfg (backend "redis").
// It does not contact Redis: an unreachable Redis shows in the first
// decisions, as the policy says.
func newRedis(cfg BackendConfig, tenants []TenantConfig, opts redisOptions) (*Redis, error) {
	cfg = cfg.withDefaults()
	c := cfg.Redis
	timeout := c.Timeout.D()
	newClient, network, addrs, err := redisClients(c, timeout)
	if err != nil {
		return nil, err
	}
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	silenceClientLog.Do(func() { redis.SetLogger(discardLogger{}) })
	r := &Redis{
		addrs:     addrs,
		probe:     dialProbe(network, addrs),
		failOpen:  cfg.OnBackendError != FailClosed,
		timeout:   timeout,
		leaseTTL:  c.LeaseTTL.D(),
		prefix:    c.KeyPrefix,
		opts:      opts,
		newClient: newClient,
		replica:   hex.EncodeToString(id[:]),
		leases:    make(map[*redisTicket]struct{}),
		stop:      make(chan struct{}),
		kick:      make(chan struct{}, 1),
		cluster:   c.Cluster,
		now:       time.Now,
	}
	made := time.Now()
	r.since = func() time.Duration { return time.Since(made) }
	r.breaker = breaker{r: r, where: addrs}
	if r.opts.RecoveryProbe <= 0 {
		r.opts.RecoveryProbe = 100 * time.Millisecond
	}
	if r.opts.LeaseRefresh == 0 {
		r.opts.LeaseRefresh = r.leaseTTL / 5
	}
	r.client.Store(&clientBox{newClient()})
	r.state.Store(&redisState{})
	r.SetTenants(time.Now(), tenants)
	if r.opts.LeaseRefresh > 0 {
		r.wg.Add(1)
		go r.refreshLoop()
	}
	return r, nil
}

// redisClients returns how to make a client for the configured Redis (a
// server or a cluster), whose every wait is bounded by timeout, and the
// network and addresses of its nodes (for the recovery probe).
func redisClients(c RedisConfig, timeout time.Duration) (newClient func() redis.UniversalClient, network string, addrs []string, err error) {
	if c.Cluster {
		base, err := redis.ParseClusterURL(c.URL)
		if err != nil {
			return nil, "", nil, fmt.Errorf("ratelimit.redis.url: %w", urlredact.Err(c.URL, err))
		}
		dial := boundedDialer(redis.NewDialer(&redis.Options{DialTimeout: timeout, TLSConfig: base.TLSConfig}))
		return func() redis.UniversalClient {
			o := *base
			o.Dialer = dial // replies bounded (see boundedConn)
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = timeout, timeout, timeout, timeout
			o.MaxRetries, o.DialerRetries, o.MaxRedirects = -1, 1, 1
			o.ContextTimeoutEnabled, o.DisableIdentity, o.Protocol = true, true, 2
			o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
			return redis.NewClusterClient(&o)
		}, "tcp", base.Addrs, nil
	}
	base, err := redis.ParseURL(c.URL)
	if err != nil {
		return nil, "", nil, fmt.Errorf("ratelimit.redis.url: %w", urlredact.Err(c.URL, err))
	}
	dial := boundedDialer(redis.NewDialer(&redis.Options{DialTimeout: timeout, TLSConfig: base.TLSConfig}))
	return func() redis.UniversalClient {
		o := *base
		o.Dialer = dial // replies bounded (see boundedConn)
		// Every wait bounded by the timeout; no retries (they would
		// multiply it); one dial attempt; no handshake beyond go-redis's
		// HELLO (which it sends on every new connection, whatever the
		// protocol: a call on a new connection takes three round trips,
		// dial, HELLO and the call) and what the URL asks for (password,
		// db).
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = timeout, timeout, timeout, timeout
		o.MaxRetries, o.DialerRetries = -1, 1
		o.ContextTimeoutEnabled, o.DisableIdentity, o.Protocol = true, true, 2
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		return redis.NewClient(&o)
	}, base.Network, []string{base.Addr}, nil
}

// dialProbe returns a probe that succeeds when one of the addresses accepts
// a connection.
func dialProbe(network string, addrs []string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		var err error
		for _, a := range addrs {
			var conn net.Conn
			if conn, err = d.DialContext(ctx, network, a); err == nil {
				return conn.Close()
			}
		}
		return err
	}
}

// Name returns "redis".
func (r *Redis) Name() string { return backendRedis }

// Healthy reports whether decisions reach Redis: false from the first failed
// call of an outage until it ends: Redis decides an admission again, or the
// probe's write succeeds after it was out of reach (the breaker may open in
// between; see noteDecided).
// On a Redis Cluster, false while any master's breaker is.
func (r *Redis) Healthy() bool {
	ok := r.breaker.healthy()
	r.nodes.Range(func(_, b any) bool {
		ok = ok && b.(*breaker).healthy()
		return ok
	})
	return ok
}

// checkAtStart asks Redis once (a PING, within the timeout), so that a Redis
// out of reach at start is said then, and its outage begins then: the log
// line with the policy, the breaker open with the probe that ends the
// outage once Redis takes its write again (idle or not), and Healthy false
// (goodput_ratelimit_backend_up 0). Before, nothing was said and the
// backend counted as up until a request's decision failed, and the
// recovery's "after 102ms" counted from that decision (a new user's
// probe). An error Redis answers (NOAUTH, LOADING) is logged alone: the
// outage of such errors ends only with a decided admission (noteDecided),
// which an idle gateway would not make, so the requests' own failures
// start it. It returns the PING's error.
func (r *Redis) checkAtStart(ctx context.Context) error {
	if cc, ok := r.client.Load().c.(*redis.ClusterClient); ok && r.cluster {
		// Room for the map's load to meet one hung node (go-redis asks
		// the nodes in a random order, each within the timeout), then
		// for the masters' pings: within one timeout, a hung node asked
		// first for the map left none, and the check reported the whole
		// cluster out, not the master by name (1 start in 3 in a test).
		cctx, cancel := context.WithTimeout(ctx, 3*r.timeout)
		defer cancel()
		return r.checkMastersAtStart(cctx, cc)
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	err := r.client.Load().c.Ping(cctx).Err()
	r.failedAtStart(&r.breaker, err, "")
	return err
}

// checkMastersAtStart is checkAtStart of a Redis Cluster: every master it
// knows is asked, and one out of reach starts its own outage, as its first
// failed call would (an operator's probe found a master down at start
// unsaid, the backend up, until a request of a tenant on it came).
func (r *Redis) checkMastersAtStart(ctx context.Context, cc *redis.ClusterClient) error {
	var mu sync.Mutex
	var errs []error
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		addr := c.Options().Addr
		// A node's outage is probed in a slot of its own (breaker.node):
		// a key that the cluster's map puts there.
		key := ""
		for i := 0; i < 100000 && key == ""; i++ {
			k := "{" + r.prefix + ":_start" + strconv.Itoa(i) + "}:r"
			if n, err := cc.MasterForKey(ctx, k); err == nil && n.Options().Addr == addr {
				key = k
			}
		}
		b := &r.breaker
		if key != "" {
			b = r.nodeBreaker(addr)
		}
		r.failedAtStart(b, err, key)
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		return nil
	})
	if err != nil {
		// Its map could not be had: the cluster as a whole is out.
		r.failedAtStart(&r.breaker, err, "")
		return err
	}
	return errors.Join(errs...)
}

// failedAtStart notes err of a start check through b (nil: none). An
// error Redis answers is said, and left to the requests' own failures
// (only a decided admission ends such an outage); one out of reach starts
// the outage, and the probe that ends it, at once.
func (r *Redis) failedAtStart(b *breaker, err error, key string) {
	var reply redis.Error
	switch {
	case err == nil:
	case errors.As(err, &reply):
		// "failed": the gateway's log reads the line as a warning.
		r.logf("ratelimit: redis %v failed the start check, answering with an error (%v); decisions follow on_backend_error while it answers so", b.where, err)
	default:
		b.noteErrorOn(err, key)
		b.openAndProbe()
	}
}

// Close stops the background work and closes the client. Leases still held
// expire on their own.
func (r *Redis) Close() error {
	r.life.Lock()
	if r.closed {
		r.life.Unlock()
		return nil
	}
	r.closed = true
	close(r.stop)
	r.life.Unlock()
	r.wg.Wait()
	return r.client.Load().c.Close()
}

// SetTenants replaces the limits. Bucket state lives in Redis under names
// derived from tenant, key id and model, so levels that remain keep it. A
// level holds nothing else: a reload makes no level, and the levels made by
// decisions before it are let go (the next decision of each makes it again,
// with the new limits). The tenants' Models maps are kept, and only read:
// the caller must not change them.
func (r *Redis) SetTenants(_ time.Time, tenants []TenantConfig) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := &redisState{tenants: make(map[string]*redisTenant, len(tenants))}
	for i := range tenants {
		tc := &tenants[i]
		rt := &redisTenant{name: tc.Name, cut: tc.Limits.OnOverrun == OverrunCut, lim: tc.Limits, modelLim: tc.Models,
			names: modelNames{lim: tc.Models, aliases: tc.ModelAliases, def: tc.defaultModel()}}
		for _, k := range tc.Keys {
			if k.Limits.IsZero() {
				continue
			}
			if rt.keyLim == nil {
				rt.keyLim = make(map[string]Limits)
			}
			rt.keyLim[k.ID] = k.Limits
		}
		ns.tenants[tc.Name] = rt
	}
	r.state.Store(ns)
}

// levels returns the levels that apply to a request of rt with keyID and
// model (the request's, matched to a configured one here, by its model or
// its adapter: resolveRequest): tenant, key, model, nil where none
// applies; the configured model it was matched to ("" for none), and
// whether by its adapter. It makes those not made yet; it does not allocate when
// they all were.
func (r *Redis) levels(rt *redisTenant, req *Request) (lv [3]*redisLevel, model string, byAdapter bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	keyID := req.KeyID
	model, byAdapter = rt.names.resolveRequest(req)
	lv = [3]*redisLevel{rt.top, rt.keys[keyID], rt.models[model]}
	if lv[0] == nil {
		lv[0] = newRedisLevel(r.levelBase(rt.name, "", ""), rt.lim, scopeTenant)
		rt.top = lv[0]
	}
	if lv[1] == nil {
		if lim := rt.keyLim[keyID]; !lim.IsZero() {
			lv[1] = newRedisLevel(r.levelBase(rt.name, "k:", keyID), lim, scopeKey)
			rt.keys = putRedisLevel(rt.keys, keyID, lv[1])
		}
	}
	if lv[2] == nil {
		if lim := rt.modelLim[model]; !lim.IsZero() {
			lv[2] = newRedisLevel(r.levelBase(rt.name, "m:", model), lim, scopeModel)
			rt.models = putRedisLevel(rt.models, model, lv[2])
		}
	}
	return lv, model, byAdapter
}

// levelBase is the start of a level's key names: "{prefix:tenant}:" for
// the tenant's own, then "k:<id>:" for a key, "m:<model>:" for a model (its
// configured name). The tenant's keys share its hash tag, and so a Redis
// Cluster slot.
func (r *Redis) levelBase(tenant, kind, name string) string {
	if kind == "" {
		return "{" + r.prefix + ":" + tenant + "}:"
	}
	return "{" + r.prefix + ":" + tenant + "}:" + kind + name + ":"
}

func putRedisLevel(m map[string]*redisLevel, name string, lv *redisLevel) map[string]*redisLevel {
	if m == nil {
		m = make(map[string]*redisLevel)
	}
	m[name] = lv
	return m
}

func newRedisLevel(base string, lim Limits, scope Scope) *redisLevel {
	lv := &redisLevel{scope: scope, lim: lim}
	if lim.RPM > 0 {
		lv.reqKey = base + "r"
		lv.reqT = formatFloat(60e6 / float64(lim.RPM))
		lv.reqCap = strconv.FormatInt(lim.requestCapacity(), 10)
	}
	if lim.TPM > 0 {
		lv.tokKey = base + "t"
		lv.tokT = formatFloat(60e6 / float64(lim.TPM))
		lv.tokCap = strconv.FormatInt(lim.TPM, 10)
	}
	if lim.MaxConcurrency > 0 {
		lv.cckKey = base + "c"
		lv.maxConc = strconv.FormatInt(lim.MaxConcurrency, 10)
	}
	return lv
}

// formatFloat avoids exponents: gopher-lua (miniredis) does not parse them.
func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func (r *Redis) nowArg(now time.Time) string {
	if r.opts.ClientTime {
		us := now.UnixMicro()
		if us > r.lastNow.Load() {
			r.lastNow.Store(us)
		}
		return strconv.FormatInt(us, 10)
	}
	return ""
}

// clock is the time of background work (heartbeat, recovery): the wall
// clock, or with ClientTime the latest time a caller passed in.
func (r *Redis) clock() time.Time {
	if r.opts.ClientTime {
		return time.UnixMicro(r.lastNow.Load())
	}
	return r.now()
}

// Admit decides on req with one script call. With redisOptions.ClientTime
// unset, now is ignored: the Redis server's clock decides. It makes the
// levels of req that no decision made since the last reload (see Redis).
func (r *Redis) Admit(ctx context.Context, now time.Time, req *Request, d *Decision) (Ticket, error) {
	*d = Decision{}
	rt := r.state.Load().tenants[req.Tenant]
	if rt == nil {
		return Ticket{}, ErrUnknownTenant
	}
	est := max(req.EstTokens, 0)
	lvs, model, byAdapter := r.levels(rt, req)
	d.Model, d.ByAdapter = model, byAdapter
	var tightest int64 // the smallest tpm that applies; 0 = none
	for _, lv := range lvs {
		if lv != nil && lv.tokKey != "" && (tightest == 0 || lv.lim.TPM < tightest) {
			tightest = lv.lim.TPM
		}
	}
	est = fitEstimate(est, req.DefaultOutput, tightest)

	c := r.admitCall(now, lvs, est)
	if len(c.keys) == 0 { // no limit at all: nothing to ask Redis
		d.Allowed = true
		return Ticket{est: est, rt: &redisTicket{est: est}, covered: math.MaxInt64}, nil
	}
	b, err := r.runAdmit(ctx, &c, d)
	if err != nil && c.lease != "" && mayHaveRun(err) {
		// Redis may have taken the lease (a reply lost to a reset
		// connection, or late; a caller that gave up): no ticket holds
		// it, so nothing would release it, and its slot stayed taken for
		// lease_ttl. The heartbeat releases it (one never taken costs a
		// ZREM); a failure of Redis's counts as a failed release
		// (releaseFailedOn) meanwhile.
		r.releaseCall(&c, now, !callerDone(ctx))
	}
	if err != nil && callerDone(ctx) { // the caller gave up (client gone): not a backend failure
		*d = Decision{Model: model}
		return Ticket{}, callerErr(ctx)
	}
	if err != nil {
		b.noteErrorOn(err, c.keys[0])
		*d = Decision{Limit: limitBackend, Model: model}
		if !r.failOpen {
			d.RetryAfter = backendRetryHint
			return Ticket{}, fmt.Errorf("ratelimit: redis: %w", err)
		}
		d.Allowed = true
		return c.failOpenTicket(), fmt.Errorf("ratelimit: redis: %w", err)
	}
	if !d.Allowed && d.Limit == limitConcurrency && r.releaseFailedOn(&c, d.Scope) {
		// Redis counted a lease this replica released and could not
		// remove (a Redis that takes no writes: READONLY, a replica after
		// a failover, still answers the refusals, which write nothing):
		// the slot is free, and Redis's count is its own failure, not the
		// tenant's. A probe found a tenant refused (429) for lease_ttl,
		// none of its requests running, while fail_open admitted the
		// others unlimited.
		*d = Decision{Limit: limitBackend, Model: model}
		if !r.failOpen {
			d.RetryAfter = backendRetryHint
			return Ticket{}, fmt.Errorf("ratelimit: redis: %w", errReleaseFailed)
		}
		d.Allowed = true
		return c.failOpenTicket(), fmt.Errorf("ratelimit: redis: %w", errReleaseFailed)
	}
	b.noteDecided(d.Allowed)
	if !d.Allowed {
		return Ticket{}, nil
	}
	return r.admittedTicket(&c, est, tightest, rt.cut), nil
}

// errReleaseFailed is a concurrency refusal that counted a lease whose
// release failed (releaseFailedOn).
var errReleaseFailed = errors.New("the concurrency limit counted slots this replica released and Redis did not remove (their release failed)")

// releaseCall hands the lease of the admission call c, which failed, to
// the heartbeat to release (see releaseLater; failed: Redis's failure, not
// the caller's).
func (r *Redis) releaseCall(c *redisCall, now time.Time, failed bool) {
	var keys []string
	for i, ref := range c.refs {
		if ref.kind == 'c' {
			keys = append(keys, c.keys[i])
		}
	}
	r.leaseMu.Lock()
	r.stale = append(r.stale, staleLease{keys: keys, lease: c.lease, at: now, failed: failed})
	r.leaseMu.Unlock()
}

// releaseFailedOn reports whether a lease that this replica released, and
// whose release failed (r.stale, released again by the next heartbeat that
// reaches Redis), holds a slot of the concurrency limit of scope among
// c's. Not one released during a heartbeat (which may renew it after its
// release) whose release worked: Redis counts that slot no more.
func (r *Redis) releaseFailedOn(c *redisCall, scope Scope) bool {
	key := ""
	for _, ref := range c.refs {
		if ref.kind == 'c' && ref.lv.scope == scope {
			key = ref.lv.cckKey
		}
	}
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	for _, sl := range r.stale {
		if sl.failed && slices.Contains(sl.keys, key) {
			return true
		}
	}
	return false
}

// redisCall is one call of the admission script: a key per limit that
// applies, what each one is, and the script's arguments.
type redisCall struct {
	keys  []string
	refs  []limitRef
	args  []any
	lease string // the concurrency lease taken; "" when no level limits concurrency
}

// admitCall builds the script call for the levels lvs (tenant, key, model;
// nil where none applies) and a charge of est tokens.
func (r *Redis) admitCall(now time.Time, lvs [3]*redisLevel, est int64) redisCall {
	c := redisCall{keys: make([]string, 0, 9), refs: make([]limitRef, 0, 9), args: make([]any, 5, 5+27)}
	hasConc := false
	for _, lv := range lvs {
		if lv == nil {
			continue
		}
		if lv.reqKey != "" {
			c.keys, c.refs = append(c.keys, lv.reqKey), append(c.refs, limitRef{lv, 'r'})
			c.args = append(c.args, "r", lv.reqT, lv.reqCap)
		}
		if lv.tokKey != "" {
			c.keys, c.refs = append(c.keys, lv.tokKey), append(c.refs, limitRef{lv, 't'})
			c.args = append(c.args, "t", lv.tokT, lv.tokCap)
		}
		if lv.cckKey != "" {
			c.keys, c.refs = append(c.keys, lv.cckKey), append(c.refs, limitRef{lv, 'c'})
			c.args = append(c.args, "c", lv.maxConc, "0")
			hasConc = true
		}
	}
	if len(c.keys) == 0 {
		return c
	}
	if hasConc {
		c.lease = r.replica + ":" + strconv.FormatUint(r.seq.Add(1), 36)
	}
	c.args[0], c.args[1], c.args[2], c.args[3] = r.nowArg(now), c.lease, strconv.FormatInt(r.leaseTTL.Microseconds(), 10), strconv.FormatInt(est, 10)
	return c
}

// runAdmit runs the call, unless its breaker (b) is open, and fills d from
// the answer.
func (r *Redis) runAdmit(ctx context.Context, c *redisCall, d *Decision) (b *breaker, err error) {
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	b = r.breakerFor(cctx, c.keys[0])
	if b.open.Load() {
		return b, errBreakerOpen
	}
	dl, _ := cctx.Deadline()
	c.args[4] = b.staleAfter(dl)
	res, err := admitScript.Run(cctx, r.client.Load().c, c.keys, c.args...).Slice()
	recv := time.Now()
	if err != nil {
		return b, err
	}
	err = r.fillDecision(b, d, res, c.refs, recv)
	if err == errTooLate && recv.Before(dl) && c.args[4] != "" {
		// Refused as late, yet answered in time: the skew was wrong for
		// this node (a Redis Cluster's nodes keep their own clocks, one
		// estimate serves them all). Asked again without the limit, in
		// what is left of the timeout.
		c.args[4] = ""
		res, err = admitScript.Run(cctx, r.client.Load().c, c.keys, c.args...).Slice()
		if err != nil {
			return b, err
		}
		err = r.fillDecision(b, d, res, c.refs, time.Now())
	}
	return b, err
}

// errTooLate is an admission Redis ran after its caller's deadline, which
// decided and charged nothing (see staleAfter): an answer as late as none.
var errTooLate = errors.New("redis ran the admission after the gateway's timeout (nothing was charged)")

// runInTime runs script, whose reply is an integer, -1 when it ran too
// late, with args[at] set to the time after which Redis must not run it
// (staleAfter: ctx's deadline); refused as late yet answered in time (the
// skew was wrong for that node, see runAdmit), it is asked again without
// that time. A reply of -1 is errTooLate.
func (r *Redis) runInTime(ctx context.Context, b *breaker, script *redis.Script, keys []string, args []any, at int) (int64, error) {
	dl, _ := ctx.Deadline()
	args[at] = b.staleAfter(dl)
	res, err := script.Run(ctx, r.client.Load().c, keys, args...).Int64()
	if err == nil && res == -1 && args[at] != "" && time.Now().Before(dl) {
		args[at] = ""
		res, err = script.Run(ctx, r.client.Load().c, keys, args...).Int64()
	}
	if err == nil && res == -1 {
		err = errTooLate
	}
	return res, err
}

// staleAfter is the admission script's ARGV[5] for a call whose caller
// waits until dl: dl on the script's clock, after which the script takes
// nothing. A call Redis runs after the gateway gave up on it (a server
// that stalled, then ran what had queued; a network that delays) would
// otherwise take a concurrency slot and charge tokens that no replica
// knows of, so none releases them: a slot held until its lease ran out,
// tokens refilled only at the limit's pace. "" (no such time) until the
// skew is known, and with ClientTime (the tests' injected clock).
//
// The skew is an underestimate (see noteSkew), so the time passed is at
// most the real one: a call may be refused as late a little early, never
// run late.
func (b *breaker) staleAfter(dl time.Time) string {
	if b.r.opts.ClientTime || !b.skewKnown.Load() {
		return ""
	}
	return strconv.FormatInt(dl.UnixMicro()+b.skew.Load(), 10)
}

// noteSkew takes the script's clock at its run (serverUS) and the reply's
// arrival here (recv). serverUS − recv is the skew less the reply's trip
// back, never more than the skew: the estimate is the largest such
// sample, which rises at once and falls by at most 1 ms a sample, unless
// a sample is more than the timeout below it: a reply comes within the
// timeout, so its trip back cannot be that long, and a clock has stepped
// (this process's forward, or Redis's back). The estimate is then that
// sample; before, it fell 1 ms a reply, and after a step of an hour the
// time passed to Redis stayed past the caller's deadline for millions of
// calls, so Redis ran calls the gateway had given up on.
func (b *breaker) noteSkew(serverUS int64, recv time.Time) {
	sample := serverUS - recv.UnixMicro()
	if !b.skewKnown.Load() {
		b.skew.Store(sample)
		b.skewKnown.Store(true)
		return
	}
	for {
		cur := b.skew.Load()
		next := max(sample, cur-1000)
		if sample < cur-b.r.timeout.Microseconds() {
			next = sample
		}
		if next == cur || b.skew.CompareAndSwap(cur, next) {
			return
		}
	}
}

// failOpenTicket is the ticket of a request admitted without a charge
// because the backend failed and the policy is fail_open: Reconcile charges
// its real usage to the token keys. Admitted unlimited by the policy, its
// usage is charged when it ends, not followed as it goes.
func (c *redisCall) failOpenTicket() Ticket {
	tk := &redisTicket{}
	for i, ref := range c.refs {
		if ref.kind == 't' {
			tk.keys = append(tk.keys, c.keys[i])
			tk.args = append(tk.args, "t", ref.lv.tokT, ref.lv.tokCap)
		}
	}
	tk.ntok = len(tk.keys)
	return Ticket{rt: tk, covered: math.MaxInt64}
}

// admittedTicket is the ticket of a request the script admitted: the token
// keys it was charged at, then the concurrency keys that hold its lease
// (which the heartbeat renews until Reconcile).
func (r *Redis) admittedTicket(c *redisCall, est, tightest int64, cut bool) Ticket {
	tk := &redisTicket{est: est, lease: c.lease}
	for _, pass := range [2]byte{'t', 'c'} {
		for i, ref := range c.refs {
			if ref.kind != pass {
				continue
			}
			tk.keys = append(tk.keys, c.keys[i])
			if pass == 't' {
				tk.args = append(tk.args, "t", ref.lv.tokT, ref.lv.tokCap)
				tk.ntok++
			} else {
				tk.args = append(tk.args, "c", "0", "0")
			}
		}
	}
	if c.lease != "" {
		r.leaseMu.Lock()
		r.leases[tk] = struct{}{}
		r.leaseMu.Unlock()
	}
	t := Ticket{est: est, rt: tk, covered: math.MaxInt64}
	if tk.ntok > 0 {
		t.covered, t.chunk, t.cut = est, overrunChunk(tightest), cut
	}
	return t
}

// callerDone reports whether ctx has ended, or reached its deadline (the
// network deadline derived from it can fire before ctx's own timer).
func callerDone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

func callerErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

var errBadReply = errors.New("unexpected reply from the admit script")

func (r *Redis) fillDecision(b *breaker, d *Decision, res []any, refs []limitRef, recv time.Time) error {
	if len(res) < 2 {
		return errBadReply
	}
	allowed, ok := res[0].(int64)
	if !ok {
		return errBadReply
	}
	if s, ok := res[len(res)-1].(string); ok {
		if us, err := strconv.ParseInt(s, 10, 64); err == nil {
			b.noteSkew(us, recv)
		}
	}
	if allowed == -1 && len(res) == 2 {
		return errTooLate
	}
	if len(res) != 2+4*len(refs) {
		return errBadReply
	}
	d.Allowed = allowed == 1
	var (
		rateDenied, concDenied, large    bool
		concScope, largeScope            Scope
		rateValue, concValue, largeValue int64
	)
	for i, ref := range refs {
		var f [4]int64
		for j := range f {
			s, ok := res[1+4*i+j].(string)
			if !ok {
				return errBadReply
			}
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return errBadReply
			}
			f[j] = v
		}
		code, remaining, reset, retry := f[0], f[1], time.Duration(f[2])*time.Microsecond, time.Duration(f[3])*time.Microsecond
		lv := ref.lv
		switch ref.kind {
		case 'r':
			if code == 1 && (!rateDenied || retry > d.RetryAfter) {
				rateDenied, d.Limit, d.Scope, d.RetryAfter, rateValue = true, limitRequests, lv.scope, retry, lv.lim.RPM
			}
			pickQuota(&d.Requests, lv.lim.RPM, remaining, reset)
		case 't':
			switch {
			case code == 2 && !large:
				large, largeScope, largeValue = true, lv.scope, lv.lim.TPM
			case code == 1 && (!rateDenied || retry > d.RetryAfter):
				rateDenied, d.Limit, d.Scope, d.RetryAfter, rateValue = true, limitTokens, lv.scope, retry, lv.lim.TPM
			}
			pickQuota(&d.Tokens, lv.lim.TPM, remaining, reset)
		case 'c':
			if code == 1 && !concDenied {
				concDenied, concScope, concValue = true, lv.scope, lv.lim.MaxConcurrency
			}
			pickQuota(&d.Concurrency, lv.lim.MaxConcurrency, remaining, 0)
		}
	}
	switch {
	case d.Allowed:
		d.Limit, d.Scope, d.RetryAfter = limitNone, scopeTenant, 0
	case large:
		d.TooLarge, d.Limit, d.Scope, d.RetryAfter, d.limitValue = true, limitTokens, largeScope, 0, largeValue
	case rateDenied:
		d.limitValue = rateValue
	case concDenied:
		d.Limit, d.Scope, d.RetryAfter, d.limitValue = limitConcurrency, concScope, concurrencyRetryHint, concValue
	default:
		return errBadReply
	}
	return nil
}

// Reconcile corrects the token charge and releases the lease, in one script
// call (none when there is nothing to do), bounded by the timeout. When the
// release fails, the heartbeat releases the lease as soon as Redis answers
// again (else it expires).
//
// It waits for that call until ctx ends (the call keeps ctx's values, not
// its end): a caller that can wait no longer (a shutdown's records) gets
// ctx's error back at once, and the call goes on without it, since go-redis
// does not end a call in flight when its context is cancelled. If Redis
// runs it, the lease is released and the tokens corrected. Else the
// correction is sent again by the heartbeat (retryFixes) when it surely did
// not run (notSent), for at most fixMaxAge, and is lost when it may have;
// and the lease is released by the heartbeat as soon as Redis answers
// again, or expires: admitScript counts a lease only until its
// expiry, lease_ttl after its last renewal, and removes it at the next
// admission (the key itself expires a second after its last lease would).
// A caller that stops waiting is not a failure of Redis: the breaker does
// not count it.
func (r *Redis) Reconcile(ctx context.Context, now time.Time, t Ticket, actualTokens int64) error {
	tk := t.rt
	if tk == nil {
		return nil
	}
	if tk.lease != "" {
		r.leaseMu.Lock()
		delete(r.leases, tk)
		if r.beating > 0 {
			// The heartbeat in flight may renew the lease after this
			// release: the next one releases it again.
			r.stale = append(r.stale, staleLease{keys: tk.keys[tk.ntok:], lease: tk.lease, at: now})
		}
		r.leaseMu.Unlock()
	}
	// Wait for a chunk in flight, and let no other start.
	tk.mu.Lock()
	tk.settled = true
	extra := tk.extra
	tk.mu.Unlock()
	delta := max(actualTokens, 0) - tk.est - extra
	if tk.lease == "" && (delta == 0 || len(tk.keys) == 0) {
		return nil
	}
	args := make([]any, 0, 3+len(tk.args))
	args = append(args, r.nowArg(now), tk.lease, strconv.FormatInt(delta, 10))
	args = append(args, tk.args...)
	call := func() (*breaker, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
		defer cancel()
		b := r.breakerFor(cctx, tk.keys[0])
		var err error
		if b.open.Load() {
			err = errBreakerOpen
		} else {
			err = reconcileScript.Run(cctx, r.client.Load().c, tk.keys, args...).Err()
		}
		if delta != 0 && tk.ntok > 0 && notSent(err) {
			// Surely not run: the heartbeat sends it again.
			r.fixLater(tokenFix{keys: tk.keys[:tk.ntok], args: tk.args[:3*tk.ntok], delta: delta, at: r.since()})
		}
		return b, err
	}
	var (
		b   *breaker
		err error
	)
	if ctx.Done() == nil {
		b, err = call()
	} else {
		type result struct {
			b   *breaker
			err error
		}
		done := make(chan result, 1)
		go func() {
			b, err := call()
			done <- result{b, err}
		}()
		select {
		case res := <-done:
			b, err = res.b, res.err
		case <-ctx.Done():
			// Abandoned: what becomes of the call is not known here.
			r.releaseLater(tk, now, false)
			return fmt.Errorf("ratelimit: redis: release abandoned: %w", callerErr(ctx))
		}
	}
	if err != nil {
		b.noteErrorOn(err, tk.keys[0])
		// Released by the first heartbeat that reaches Redis (at once when
		// an outage ends), not held until the lease expires.
		r.releaseLater(tk, now, true)
		return fmt.Errorf("ratelimit: redis: %w", err)
	}
	b.noteAnswer()
	return nil
}

// fixLater hands a token correction that surely did not run to the
// heartbeat (retryFixes).
func (r *Redis) fixLater(f tokenFix) {
	r.leaseMu.Lock()
	if len(r.fixes) >= maxFixes {
		r.fixes = r.fixes[1:]
		r.fixesDropped++
	}
	r.fixes = append(r.fixes, f)
	r.leaseMu.Unlock()
}

// retryFixes sends again the token corrections that surely did not run
// (notSent), each on its own (a request's keys share its tenant's slot), at
// most fixesPerRound of them and for at most half the heartbeat's period,
// so that it delays the leases' next renewal little: the rest wait for the
// next heartbeat. A correction whose Redis (the server,
// or the master of its slot) is out of reach waits too, as do the others of
// that Redis once one failed. One older than fixMaxAge is dropped, and the
// log says how many were, at most once a minute.
func (r *Redis) retryFixes() {
	r.leaseMu.Lock()
	fixes, dropped := r.fixes, r.fixesDropped
	r.fixes, r.fixesDropped = nil, 0
	r.leaseMu.Unlock()
	budget := time.Now().Add(r.opts.LeaseRefresh / 2) // no heartbeat (tests): none
	if r.opts.LeaseRefresh <= 0 {
		budget = time.Now().Add(time.Hour)
	}
	var keep []tokenFix
	var failed []*breaker
	sent := 0
	for i, f := range fixes {
		if r.since()-f.at > fixMaxAge {
			dropped++
			continue
		}
		stopping := false
		select {
		case <-r.stop:
			stopping = true
		default:
		}
		if stopping || sent >= fixesPerRound || time.Now().After(budget) {
			keep = append(keep, fixes[i:]...)
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		b := r.breakerFor(ctx, f.keys[0])
		if b.open.Load() || slices.Contains(failed, b) {
			cancel()
			keep = append(keep, f)
			continue
		}
		sent++
		args := make([]any, 0, 3+len(f.args))
		args = append(args, r.nowArg(r.clock()), "", strconv.FormatInt(f.delta, 10))
		args = append(args, f.args...)
		err := reconcileScript.Run(ctx, r.client.Load().c, f.keys, args...).Err()
		cancel()
		if err == nil {
			b.noteAnswer()
			continue
		}
		b.noteErrorOn(err, f.keys[0])
		failed = append(failed, b)
		if notSent(err) {
			keep = append(keep, f)
		} else {
			dropped++ // it may have run: not sent again (notSent)
		}
	}
	r.leaseMu.Lock()
	if len(keep) > 0 {
		r.fixes = append(keep, r.fixes...)
	}
	dropped += r.fixesDropped
	r.fixesDropped = 0
	say := dropped > 0 && (r.dropSaid == 0 || r.since()-r.dropSaid >= time.Minute)
	if dropped > 0 && !say {
		r.fixesDropped = dropped // said with a later line
	}
	if say {
		r.dropSaid = r.since()
	}
	r.leaseMu.Unlock()
	if say {
		r.logf("ratelimit: redis %v: %d token corrections of ended requests dropped: not taken within %v of their end, or failed where Redis may have run them (their tokens stay as charged)", r.addrs, dropped, fixMaxAge)
	}
}

// fixesPerRound bounds the corrections one heartbeat sends again (about
// 130 µs each on a local Redis; a remote one's round trip each).
const fixesPerRound = 256

// releaseLater hands the lease of tk, if it holds one, to the heartbeat to
// release: its release failed, or was abandoned (failed: the first).
func (r *Redis) releaseLater(tk *redisTicket, now time.Time, failed bool) {
	if tk.lease == "" {
		return
	}
	r.leaseMu.Lock()
	r.stale = append(r.stale, staleLease{keys: tk.keys[tk.ntok:], lease: tk.lease, at: now, failed: failed})
	r.leaseMu.Unlock()
}

// extend charges n more tokens to the token keys of t's request (see
// Gate.Progress), from a goroutine of its own: the caller is the stream's
// reader, which must not wait for Redis. Chunks asked for while one is in
// flight are sent together next. A chunk refused under cut (the tokens are
// not there) sets t.rt.cut; a chunk that surely did not run (not sent, run
// too late, refused) is left to the request's end, which charges its real
// usage, and one that may have run (a timeout: its reply lost or late)
// counts as charged, never charged twice (mayHaveRun); neither cuts a
// stream.
func (r *Redis) extend(now time.Time, t *Ticket, n int64) {
	tk := t.rt
	if tk == nil || tk.ntok == 0 {
		return
	}
	tk.at.Store(now.UnixMicro())
	tk.pending.Add(n)
	if !tk.growing.CompareAndSwap(false, true) {
		return // the goroutine in flight sends it
	}
	r.life.Lock()
	defer r.life.Unlock()
	if r.closed {
		tk.growing.Store(false)
		return
	}
	r.wg.Add(1)
	go r.grow(tk, t.cut)
}

func (r *Redis) grow(tk *redisTicket, cut bool) {
	defer r.wg.Done()
	for {
		n := tk.pending.Swap(0)
		if n == 0 {
			tk.growing.Store(false)
			// A chunk added between the Swap and the Store would be left
			// behind: take it back if nobody else has.
			if tk.pending.Load() == 0 || !tk.growing.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		tk.mu.Lock()
		if tk.settled {
			tk.mu.Unlock()
			tk.growing.Store(false)
			return
		}
		ok, err := r.charge(tk, n, cut)
		if (err == nil && ok) || mayHaveRun(err) {
			// Charged, or perhaps (its reply lost or late): the end's
			// correction does not charge it again (at most once, as
			// notSent says for corrections).
			tk.extra += n
		}
		tk.mu.Unlock()
		if err == nil && !ok {
			tk.cut.Store(true)
		}
	}
}

// charge runs extendScript for n tokens on tk's token keys.
func (r *Redis) charge(tk *redisTicket, n int64, cut bool) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	b := r.breakerFor(ctx, tk.keys[0])
	if b.open.Load() {
		b.noteError(errBreakerOpen)
		return false, errBreakerOpen
	}
	mode := "charge"
	if cut {
		mode = "cut"
	}
	args := make([]any, 0, 4+2*tk.ntok)
	args = append(args, r.nowArg(time.UnixMicro(tk.at.Load())), strconv.FormatInt(n, 10), mode, "")
	for i := range tk.ntok {
		args = append(args, tk.args[3*i+1], tk.args[3*i+2])
	}
	res, err := r.runInTime(ctx, b, extendScript, tk.keys[:tk.ntok], args, 3)
	if err != nil {
		b.noteErrorOn(err, tk.keys[0])
		return false, err
	}
	b.noteAnswer()
	return res == 1, nil
}

// refreshLoop is the replica's heartbeat: every LeaseRefresh, and at once
// when an outage ends, it renews the leases of live requests and releases
// those whose release failed.
func (r *Redis) refreshLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.opts.LeaseRefresh)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-r.kick:
		}
		_ = r.heartbeat(r.clock(), nil)
		r.retryFixes()
		r.endMovedOutages()
		r.checkQuietOutages()
		r.sayFlaps()
	}
}

// checkQuietOutages asks Redis, at each heartbeat, for the probe's write
// for each outage under way in which Redis was out of reach and that the
// breaker did not open for (fewer failures than breakerAfter: a Redis that
// paused for half a second): on a replica that then decides nothing (idle,
// or serving only tenants without limits) no call would end it, and the
// gateway reported Redis down, and paged, for as long as that lasted (a
// probe: ten minutes). An answer ends the outage; a failure is a failed
// call's (enough of them open the breaker, whose probe takes over). A
// Redis Cluster master's outage ends too when another master serves its
// slot (probeNode). An outage of errors Redis answered ends as before, at
// an admission.
func (r *Redis) checkQuietOutages() {
	check := func(b *breaker, write func(ctx context.Context) (moved string, err error), key string) {
		if b.downSince.Load() == 0 || b.open.Load() || b.refusing.Load() {
			return // none, its probe's, or one only an admission ends
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		moved, err := write(ctx)
		cancel()
		switch {
		case moved != "":
			b.endMoved(moved)
		case err != nil:
			b.noteErrorOn(err, key)
		case !b.open.Load(): // not opened meanwhile: its probe ends that outage
			b.endOutageAs("answers again (the heartbeat's check)")
			r.probed(nil)
		}
	}
	check(&r.breaker, func(ctx context.Context) (string, error) {
		c := r.client.Load().c
		return "", r.probeWrite(ctx, c, r.probeKey(), c.Ping)
	}, "")
	r.nodeOutages(func(cc *redis.ClusterClient, b *breaker, key string) {
		check(b, func(ctx context.Context) (string, error) { return b.probeNode(ctx, cc, key) }, key)
	})
}

// nodeOutages calls f for each Redis Cluster master's outage under way
// whose breaker is closed, with the key of its call that failed.
func (r *Redis) nodeOutages(f func(cc *redis.ClusterClient, b *breaker, key string)) {
	if !r.cluster {
		return
	}
	cc, ok := r.client.Load().c.(*redis.ClusterClient)
	if !ok {
		return
	}
	r.nodes.Range(func(_, v any) bool {
		b := v.(*breaker)
		if key := b.failedKey.Load(); key != nil && b.downSince.Load() != 0 && !b.open.Load() {
			f(cc, b, *key)
		}
		return true
	})
}

// endMovedOutages ends the outage of each Redis Cluster master whose
// breaker is closed (Redis answered its calls with errors: out of memory,
// TRYAGAIN; no probe runs for those, an admission ends them) and whose
// failed slot another master serves now (a manual failover, a migration):
// no call would be counted against it again, and the gateway would report
// Redis unhealthy for good.
func (r *Redis) endMovedOutages() {
	r.nodeOutages(func(cc *redis.ClusterClient, b *breaker, key string) {
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		node, err := cc.MasterForKey(ctx, key)
		cancel()
		if err == nil && node.Options().Addr != b.node {
			b.endMoved(node.Options().Addr)
		}
	})
}

// heartbeat renews the lease of every live request of this replica (ZADD:
// a lease that expired while Redis was out of reach is created again, since
// its holder still runs) and releases the stale ones, in calls of about
// heartbeatBatch keys each (one call with every lease kept a single Redis
// from all its other clients for as long as it ran: 25–65 ms for 5,000
// leases, BenchmarkRedisHeartbeat). On a Redis Cluster a call's keys share
// a slot (a tenant's), and the calls go by master. The calls of a Redis
// (the server, or a master) go in pipelines of up to heartbeatPipeline
// keys, up to heartbeatCalls pipelines in flight at once, each bounded by
// the timeout: a pipeline is one round trip, in which Redis still runs
// each call on its own, between other clients' commands. Calls one after
// another took a round trip each: at 80 ms (a managed Redis in another
// zone) 5,000 leases took 1.6 s, past the renewal period.
//
// A pipeline renews the leases still live when it is made, so that a lease
// is renewed at most a pipeline's time after its release. Stale leases
// older than the lease lifetime (and a call) have expired: they are
// dropped. A Redis's first failure ends its renewal (no more pipelines to
// it) and its breaker notes it once, as it notes once the answers of a
// renewal that succeeds; the stale leases of the calls that failed and of
// those not made are kept for the next heartbeat. No call goes to a Redis
// whose breaker is open, unless that breaker is force (the recovery
// probe's, before it closes it).
func (r *Redis) heartbeat(now time.Time, force *breaker) error {
	if !r.cluster && r.open.Load() && force != &r.breaker {
		return errBreakerOpen
	}
	// A run of calls per hash tag: one on a server, one per tenant on a
	// Redis Cluster.
	type run struct {
		live  []*redisTicket
		stale []staleLease
		key   string // a key of the run's slot
	}
	runs := map[string]*run{}
	keys := 0
	get := func(key string) *run {
		tag := ""
		if r.cluster {
			tag = hashTag(key)
		}
		g := runs[tag]
		if g == nil {
			g = &run{key: key}
			runs[tag] = g
		}
		return g
	}
	r.leaseMu.Lock()
	for tk := range r.leases {
		g := get(tk.keys[tk.ntok]) // a request's keys share its tenant's slot
		g.live = append(g.live, tk)
		keys += len(tk.keys) - tk.ntok
	}
	for _, sl := range r.stale {
		if now.Sub(sl.at) > r.leaseTTL+r.timeout || len(sl.keys) == 0 {
			continue // expired: renewed last at most a call's time after its release
		}
		g := get(sl.keys[0])
		g.stale = append(g.stale, sl)
		keys += len(sl.keys)
	}
	r.stale = nil
	r.beating++
	r.leaseMu.Unlock()

	// The runs by the breaker of their Redis: the server's, or a
	// master's.
	type renewal struct {
		b        *breaker
		key      string // a key of a slot of b's
		runs     []*run
		err      error        // the first failure: no more pipelines
		failed   []staleLease // the stale leases of the calls that failed
		answered bool
	}
	var renewals []*renewal
	byBreaker := map[*breaker]*renewal{}
	for _, g := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		b := r.breakerFor(ctx, g.key)
		cancel()
		rn := byBreaker[b]
		if rn == nil {
			rn = &renewal{b: b, key: g.key}
			byBreaker[b] = rn
			renewals = append(renewals, rn)
		}
		rn.runs = append(rn.runs, g)
	}

	ttl := strconv.FormatInt(r.leaseTTL.Microseconds(), 10)
	// next returns the next call of g: its live leases still live, then
	// its stale ones, up to heartbeatBatch keys or just past it (a
	// request's leases go in one call); no keys when g has none left.
	next := func(g *run) leaseCall {
		c := leaseCall{args: []any{r.nowArg(now), ttl, ""}}
		r.leaseMu.Lock()
		for len(g.live) > 0 && len(c.keys) < heartbeatBatch {
			tk := g.live[0]
			g.live = g.live[1:]
			if _, ok := r.leases[tk]; !ok {
				continue // released since: Reconcile released it
			}
			for _, k := range tk.keys[tk.ntok:] {
				c.keys, c.args = append(c.keys, k), append(c.args, "+", tk.lease)
			}
		}
		r.leaseMu.Unlock()
		for len(g.stale) > 0 && len(c.keys) < heartbeatBatch {
			sl := g.stale[0]
			g.stale = g.stale[1:]
			for _, k := range sl.keys {
				c.keys, c.args = append(c.keys, k), append(c.args, "-", sl.lease)
			}
			c.stale = append(c.stale, sl)
		}
		return c
	}
	var (
		mu sync.Mutex // guards renewals and their runs, and at
		at int        // renewals[at] is the one to take the next pipeline from
	)
	// take returns the calls of the next pipeline and their renewal, or
	// nil when none is left.
	take := func() (*renewal, []leaseCall) {
		mu.Lock()
		defer mu.Unlock()
		for ; at < len(renewals); at++ {
			rn := renewals[at]
			if rn.err == nil && rn.b.open.Load() && rn.b != force {
				rn.err = errBreakerOpen
			}
			if rn.err != nil {
				continue
			}
			var calls []leaseCall
			n := 0
			for len(rn.runs) > 0 && n < heartbeatPipeline {
				c := next(rn.runs[0])
				if len(c.keys) == 0 {
					rn.runs = rn.runs[1:]
					continue
				}
				calls = append(calls, c)
				n += len(c.keys)
			}
			if len(calls) > 0 {
				return rn, calls
			}
		}
		return nil, nil
	}
	send := func() {
		for {
			rn, calls := take()
			if rn == nil {
				return
			}
			errs := r.leaseCalls(rn.b, calls)
			mu.Lock()
			for i, err := range errs {
				if err == nil {
					rn.answered = true
					continue
				}
				rn.failed = append(rn.failed, calls[i].stale...)
				if rn.err == nil {
					rn.err = err
				}
			}
			mu.Unlock()
		}
	}
	// As many senders as pipelines, up to heartbeatCalls.
	senders := min(heartbeatCalls, len(renewals)+keys/heartbeatPipeline)
	var wg sync.WaitGroup
	for range senders - 1 {
		wg.Go(send)
	}
	send()
	wg.Wait()

	var (
		errs   []error
		failed []staleLease
	)
	for _, rn := range renewals {
		switch {
		case rn.err == nil && rn.answered:
			rn.b.noteAnswer()
		case rn.err != nil && !errors.Is(rn.err, errBreakerOpen):
			rn.b.noteErrorOn(rn.err, rn.key)
		}
		if rn.err != nil {
			errs = append(errs, rn.err)
			failed = append(failed, rn.failed...)
			for _, g := range rn.runs {
				failed = append(failed, g.stale...)
			}
		}
	}
	r.leaseMu.Lock()
	r.beating--
	r.stale = append(r.stale, failed...)
	r.leaseMu.Unlock()
	return errors.Join(errs...)
}

// leaseCall is one call of leaseScript: its keys (of one slot), its
// arguments, and the stale leases it releases.
type leaseCall struct {
	keys  []string
	args  []any
	stale []staleLease
}

// leaseCalls sends calls, all to b's Redis, in one pipeline bounded by the
// timeout, and returns each call's error. A call whose script Redis did not
// have (it restarted, or its scripts were flushed) is sent again as EVAL,
// which loads it, and one refused as late yet answered in time (see
// runInTime) again without that time, in one more round trip.
func (r *Redis) leaseCalls(b *breaker, calls []leaseCall) []error {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	dl, _ := ctx.Deadline()
	after := b.staleAfter(dl)
	c := r.client.Load().c
	cmds := make([]*redis.Cmd, len(calls))
	pipe := c.Pipeline()
	for i := range calls {
		calls[i].args[2] = after
		cmds[i] = leaseScript.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx) // each call's error is its command's
	var again []int
	for i, cmd := range cmds {
		res, err := cmd.Int64()
		switch {
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
		case err == nil && res == -1 && after != "" && time.Now().Before(dl):
			calls[i].args[2] = ""
		default:
			continue
		}
		again = append(again, i)
	}
	if len(again) > 0 {
		pipe := c.Pipeline()
		for _, i := range again {
			cmds[i] = leaseScript.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	errs := make([]error, len(calls))
	for i, cmd := range cmds {
		res, err := cmd.Int64()
		if err == nil && res == -1 {
			err = errTooLate
		}
		errs[i] = err
	}
	return errs
}

// heartbeatCalls bounds the heartbeat's pipelines in flight at once (each
// on a connection of its own: the pool's other connections serve the
// admissions meanwhile). On a Redis Cluster the masters' renewals go at
// once: one after another, a hung master held the others' for a timeout.
var heartbeatCalls = 4

// heartbeatBatch is about how many keys (a lease's concurrency keys, 1 to 3
// a request) one call of the heartbeat carries. On a busy 2-CPU machine
// (BenchmarkRedisHeartbeat, 5,000 leases) a call of 256 took Redis about
// 1 ms (its median), one of 5,000 25–65 ms.
var heartbeatBatch = 256

// heartbeatPipeline is about how many keys one pipeline of the heartbeat
// carries (16 calls of heartbeatBatch): with 5,000 leases two round trips,
// at once, each some 16 ms of Redis's time and well within a timeout.
var heartbeatPipeline = 16 * 256

func hashTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '}' {
			return key[:i+1]
		}
	}
	return key
}

// silenceClientLog replaces go-redis's logger (a process-wide setting) once:
// it prints a line per failed dial, thousands a second during an outage under
// load. Failures are counted in goodput_ratelimit_backend_errors_total and
// logged a few times per outage at most, by noteCause and endOutage.
var silenceClientLog sync.Once

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

func (r *Redis) logf(format string, args ...any) {
	if r.opts.Logf != nil {
		r.opts.Logf(format, args...)
	}
}

// breaker is the outage state of one Redis: the server, or the whole of a
// Redis Cluster while no node can be told (the embedded one of Redis), or
// one master of a Redis Cluster, so that a master that fails is an outage
// of the tenants whose slots it serves, not of every tenant.
type breaker struct {
	r     *Redis
	where []string // the addresses the log names
	node  string   // a Redis Cluster master's address; "" for the embedded one

	recovering atomic.Bool
	streak     atomic.Int32 // consecutive calls that failed to reach Redis
	streakAt   atomic.Int64 // the streak's first failure (ns, Redis.since)
	open       atomic.Bool  // the breaker: calls fail at once until Redis takes the probe's write
	downSince  atomic.Int64 // the current outage's first failure (ns, Redis.since, plus 1); 0 = healthy
	downCalls  atomic.Int64 // calls failed in the current outage
	refusing   atomic.Bool  // the outage has had an error Redis answered (out of memory, say)
	answered   atomic.Bool  // a call succeeded during the current outage (the heartbeat was woken)
	causeMu    sync.Mutex   // serialises the outage's start and its log lines of causes
	causes     []string     // the kinds of error the current outage has logged (errKind)

	// Outages that follow one another within flapWindow are counted, not
	// logged one by one (see noteCause); causeMu guards these.
	lastEnd   time.Duration // Redis.since at the last outage's end; 0: none yet
	quiet     bool          // the current outage has not been logged: it started within flapWindow of the last one's end
	flaps     int           // quiet outages ended since flapSaid
	flapCalls int64         // the calls failed in them
	flapSaid  time.Duration // Redis.since at the last line that said an outage ended

	// failedKey is a key of the latest failed call (node breakers): the
	// probe writes in its slot, which this node served then.
	failedKey atomic.Pointer[string]

	// skew estimates the script's clock (this Redis's TIME) minus this
	// process's wall clock, in µs, from the admission replies (see
	// noteSkew); it lets a call carry the time after which Redis must not
	// run it (staleAfter). skewKnown: one reply has come. Each master of a
	// Redis Cluster keeps its own clock, so each breaker has its own.
	skew      atomic.Int64
	skewKnown atomic.Bool
}

// healthy reports whether b has no outage and its breaker is closed.
func (b *breaker) healthy() bool { return b.downSince.Load() == 0 && !b.open.Load() }

// breakerFor returns the breaker of the calls on key: the embedded one for a
// single server; on a Redis Cluster the breaker of the master that serves
// key's slot (by the client's map of the slots), or the embedded one while
// that is not known (no node answered yet) or while the embedded one is open
// (the whole cluster out of reach: asking for the map would wait on it).
func (r *Redis) breakerFor(ctx context.Context, key string) *breaker {
	if !r.cluster || r.open.Load() {
		return &r.breaker
	}
	cc, ok := r.client.Load().c.(*redis.ClusterClient)
	if !ok {
		return &r.breaker
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return &r.breaker
	}
	return r.nodeBreaker(node.Options().Addr)
}

// nodeBreaker returns the breaker of the Redis Cluster master at addr,
// made at its first call.
func (r *Redis) nodeBreaker(addr string) *breaker {
	if b, ok := r.nodes.Load(addr); ok {
		return b.(*breaker)
	}
	b, _ := r.nodes.LoadOrStore(addr, &breaker{r: r, where: []string{addr}, node: addr})
	return b.(*breaker)
}

// noteAnswer notes a call that Redis answered (a release, a heartbeat, a
// chunk of a stream): the breaker's streak of failures ends. An outage in
// which Redis was out of reach ends with it. One in which Redis answered
// with errors (out of memory, maxmemory with noeviction) does not: Redis
// then still runs a release (ZREM) or a refusal (which writes nothing)
// while it refuses every admission, and each request that ended would end
// the outage until the next admission started another; only an admission
// ends it (noteDecided). The first answer of such an outage wakes the
// heartbeat, so that leases whose release failed go and live ones are made
// again without waiting for its tick.
func (b *breaker) noteAnswer() {
	if b.streak.Load() != 0 {
		b.streak.Store(0)
	}
	if b.downSince.Load() == 0 {
		return
	}
	if !b.refusing.Load() {
		// Redis was out of reach, and answers: whatever the call, the
		// outage is over (with long streams and no new admission, it
		// would otherwise last as long as they do). Not while the
		// breaker is open: the probe ends that outage once it closes it
		// (its heartbeat answers first).
		if !b.open.Load() {
			b.endOutage()
		}
		return
	}
	if b.answered.CompareAndSwap(false, true) {
		b.r.wakeHeartbeat()
	}
}

// wakeHeartbeat makes the heartbeat run at once (see refreshLoop).
func (r *Redis) wakeHeartbeat() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// noteDecided notes an admission that Redis decided, and ends the current
// outage, if any: when Redis admitted the request (it wrote its charge and
// lease), or when it refused it (which writes nothing) and no failure of the
// outage was an error Redis answered, i.e. Redis was out of reach and now
// answers. A refusal during an outage of errors Redis answers (out of
// memory: every write refused) shows only that Redis still reads.
func (b *breaker) noteDecided(admitted bool) {
	if !admitted && b.refusing.Load() {
		b.noteAnswer()
		return
	}
	b.endOutage()
}

// endOutage ends the current outage, if any, with one log line, and wakes
// the heartbeat.
func (b *breaker) endOutage() {
	b.endOutageAs("answers again")
}

// endOutageAs ends the current outage, if any, with a log line that says
// how (what), or counted with the others if it was quiet (flapWindow), and
// wakes the heartbeat.
func (b *breaker) endOutageAs(what string) {
	if b.streak.Load() != 0 {
		b.streak.Store(0)
	}
	since := b.downSince.Load()
	if since == 0 {
		return
	}
	// Reset before the outage ends: a failure of the outage that races
	// with its end may leave refusing set for the next one, where it only
	// makes a refusal wait for an admission to end it.
	b.refusing.Store(false)
	b.answered.Store(false)
	b.causeMu.Lock()
	defer b.causeMu.Unlock()
	if !b.downSince.CompareAndSwap(since, 0) {
		return
	}
	b.r.wakeHeartbeat() // leases released during the outage go now, live ones are renewed
	now := b.r.since()
	b.lastEnd = now
	calls := b.downCalls.Swap(0)
	if b.quiet {
		b.quiet = false
		b.flaps++
		b.flapCalls += calls
		b.sayFlapsLocked(now)
		return
	}
	b.flapSaid = now
	b.r.logf("ratelimit: redis %v %s after %v; %d calls failed meanwhile",
		b.where, what, (now + 1 - time.Duration(since)).Round(time.Millisecond), calls)
}

// flapWindow: an outage that starts within it of the last one's end is
// not logged, unless it lasts flapLast; its end is counted, and the count
// said at most once per flapWindow. A Redis at maxclients refuses every
// new connection while the gateway's open ones still answer: each call on
// a new one failed and the next on an old one answered, and a probe logged
// about 700 lines a second, an outage's start and its end for each failed
// call, for as long as that lasted.
const (
	flapWindow = 10 * time.Second
	flapLast   = time.Second
)

// sayFlapsLocked (causeMu held) says how many quiet outages have ended
// since the last line that said one ended, when there are some and that
// line is at least flapWindow old.
func (b *breaker) sayFlapsLocked(now time.Duration) {
	if b.flaps == 0 || now-b.flapSaid < flapWindow {
		return
	}
	b.r.logf("ratelimit: redis %v failed and answered again %d more times in the last %v (%d calls failed in them): "+
		"outages that start within %v of the last one's end are counted here, not logged one by one, unless they last %v",
		b.where, b.flaps, (now - b.flapSaid).Round(time.Second), b.flapCalls, flapWindow, flapLast)
	b.flaps, b.flapCalls, b.flapSaid = 0, 0, now
}

// sayFlaps says, at the heartbeat, the quiet outages counted and not yet
// said (sayFlapsLocked), on the server's breaker and each master's: once
// the flapping stops, no outage's end would say them.
func (r *Redis) sayFlaps() {
	say := func(b *breaker) {
		b.causeMu.Lock()
		b.sayFlapsLocked(r.since())
		b.causeMu.Unlock()
	}
	say(&r.breaker)
	r.nodes.Range(func(_, v any) bool {
		say(v.(*breaker))
		return true
	})
}

// breakerAfter consecutive calls that fail to reach Redis, over at least half
// the timeout, open the breaker: decisions then apply on_backend_error at
// once, instead of each waiting out the timeout on a Redis that does not
// answer (a partition, a hung server), and the probe watches for Redis to
// take a write again. A refused connection opens it at once. The span keeps
// one stall of the gateway's own CPUs from opening it: the calls in flight
// then all miss their deadline together, although Redis answered them.
const breakerAfter = 3

// errBreakerOpen is the failure of a call made while the breaker is open.
var errBreakerOpen = errors.New("not asked: redis failed repeatedly, waiting for it to answer")

// noteError starts an outage, or names a new cause in the one under way
// (noteCause), and opens the breaker and starts the recovery probe when
// calls keep failing to reach Redis or a connection is refused (go-redis
// alone would keep failing fast on its last dial error and retry only once
// a second). An error that Redis itself answered (a script error) does not
// count: Redis is there.
func (b *breaker) noteError(err error) {
	b.noteErrorOn(err, "")
}

// noteErrorOn is noteError for a call on key (a node breaker's probe
// writes in key's slot).
func (b *breaker) noteErrorOn(err error, key string) {
	b.downCalls.Add(1)
	if errors.Is(err, errBreakerOpen) {
		return
	}
	if key != "" && b.node != "" {
		b.failedKey.Store(&key)
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		b.refusing.Store(true) // before the outage starts: see noteDecided
	}
	b.noteCause(err, true)
	if reply != nil {
		return
	}
	var oe *net.OpError
	dial := errors.As(err, &oe) && oe.Op == "dial"
	r := b.r
	now := int64(r.since())
	n := b.streak.Add(1)
	if n == 1 {
		b.streakAt.Store(now)
	}
	if !dial && (n < breakerAfter || time.Duration(now-b.streakAt.Load()) < r.timeout/2) {
		return
	}
	b.openAndProbe()
}

// openAndProbe opens the breaker and starts the recovery probe, unless it
// runs already.
func (b *breaker) openAndProbe() {
	r := b.r
	if b.node != "" && b.failedKey.Load() == nil {
		return // no slot to probe (cannot happen: every node call names its key)
	}
	b.open.Store(true)
	if !b.recovering.CompareAndSwap(false, true) {
		return
	}
	r.life.Lock()
	defer r.life.Unlock()
	if r.closed {
		b.recovering.Store(false)
		return
	}
	r.wg.Add(1)
	if b.node != "" {
		go b.probing(b.recoverNode)
	} else {
		go b.probing(b.recover)
	}
}

// maxCauses bounds the lines that name an outage's causes: the line that
// starts it, then one for each kind of error it has not named yet.
const maxCauses = 5

// noteCause starts an outage with the failure err (when start: a call
// failed) and logs it (unless it is quiet: flapWindow; then once it has
// lasted flapLast), or, during an outage, logs err when it is of a kind
// (errKind) the outage has not named yet: the cause can change (a Redis
// that restarted reset the connections, then refused every call for a
// password it now required), and the first line names only the first. A
// kind that comes back is not named again, and an outage names at most
// maxCauses, so that errors of changing kinds cannot flood the log.
func (b *breaker) noteCause(err error, start bool) {
	kind := errKind(err)
	b.causeMu.Lock()
	defer b.causeMu.Unlock()
	now := b.r.since()
	if start && b.downSince.CompareAndSwap(0, int64(now)+1) {
		b.causes = append(b.causes[:0], kind)
		// One of outages that follow one another (flapping) is counted
		// at its end instead (flapWindow).
		b.quiet = b.lastEnd != 0 && now-b.lastEnd < flapWindow
		if !b.quiet {
			b.sayFailing("", err)
		}
		return
	}
	down := b.downSince.Load()
	if down == 0 {
		return
	}
	if b.quiet {
		// Said once it has lasted flapLast: no longer a blip between
		// answers, and perhaps a long outage.
		if lasted := now + 1 - time.Duration(down); lasted >= flapLast {
			b.quiet = false
			b.sayFailing(" for "+lasted.Round(time.Millisecond).String(), err)
		}
		return
	}
	if len(b.causes) >= maxCauses || slices.Contains(b.causes, kind) {
		return
	}
	b.causes = append(b.causes, kind)
	b.r.logf("ratelimit: redis %v still failing, now (%v)", b.where, err)
}

// sayFailing logs the start of an outage, with its first error, or, for
// one said late (quiet), for how long it has lasted (lasted).
func (b *breaker) sayFailing(lasted string, err error) {
	policy := FailClosed + ": refusing requests with 503"
	if b.r.failOpen {
		policy = FailOpen + ": admitting requests unlimited"
	}
	whose := ""
	if b.node != "" {
		whose = " (the tenants whose slots this Redis Cluster master serves)"
	}
	b.r.logf("ratelimit: redis %v failing%s (%v); %s%s until it answers", b.where, lasted, err, policy, whose)
}

// errKind tells causes of failure apart for the outage log: an error Redis
// answered by its code (NOAUTH, OOM, READONLY, LOADING, ERR), a timeout as
// one, whichever wait ran out, a network error by its operation and system
// error (dial: connect: connection refused; read: connection reset by
// peer), without the addresses and ports, which differ from call to call.
func errKind(err error) string {
	var reply redis.Error
	if errors.As(err, &reply) {
		code, _, _ := strings.Cut(reply.Error(), " ")
		return code
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	if errors.Is(err, errReplyRefused) {
		return errReplyRefused.Error()
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Op + ": " + oe.Err.Error()
	}
	return err.Error()
}

// recover is one round of the probe (see probing) of the server's breaker:
// it dials Redis (a bare dial: a client would log every failure), and once
// Redis accepts a connection and takes a write on a fresh client
// (probeWrite), makes that client the current one, closes the old one (its
// connections may be stuck on a server that hung), runs the heartbeat and
// closes the breaker (true). That ends an outage of calls that could not
// reach Redis; one in which Redis answered with errors (out of memory)
// ends with the first admission (noteDecided).
//
// Whenever the breaker is open, a probe is running: a probe clears
// recovering before it closes the breaker, so a failure that opens the
// breaker again meanwhile starts the next probe.
func (b *breaker) recover() bool {
	r := b.r
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	err := r.probe(ctx)
	cancel()
	if err != nil {
		b.noteCause(err, false)
		return false
	}
	c := r.newClient()
	ctx, cancel = context.WithTimeout(context.Background(), r.timeout)
	err = r.probeWrite(ctx, c, r.probeKey(), c.Ping)
	cancel()
	if err != nil {
		c.Close()
		b.noteCause(err, false) // the probe's failures are the outage's causes too
		r.probed(err)
		return false
	}
	select {
	case <-r.stop: // Close already ran or is running: do not leak c
		c.Close()
		b.recovering.Store(false)
		return true
	default:
	}
	old := r.client.Swap(&clientBox{c})
	old.c.Close()
	b.close(r.clock())
	return true
}

// probing runs round (recover or recoverNode: one probe) every probe
// interval until it returns true (the breaker closed, or the backend is
// closing) or the backend closes.
func (b *breaker) probing(round func() bool) {
	r := b.r
	defer r.wg.Done()
	t := time.NewTicker(r.opts.RecoveryProbe)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			b.recovering.Store(false)
			return
		case <-t.C:
		}
		if round() {
			return
		}
	}
}

// close ends a recovery that reached Redis: before the first decision,
// leases whose release failed during the outage go and live ones are
// renewed (or made again), then the breaker closes, and the outage ends
// unless Redis answered it with errors (see noteDecided).
func (b *breaker) close(now time.Time) {
	r := b.r
	b.streak.Store(0)
	_ = r.heartbeat(now, b)
	b.streak.Store(0)
	b.recovering.Store(false)
	b.open.Store(false)
	if !b.refusing.Load() {
		b.endOutage()
	}
	r.probed(nil)
}

// recoverNode is recover for the breaker of a Redis Cluster master. Each
// round it has the client reload its map of the slots (in the background),
// then:
//   - when another master serves the slot of the call that failed (a
//     replica took over: a failover), this master's outage ends, its
//     tenants' calls now go to that master (under that one's breaker);
//   - otherwise, once this master accepts a connection and takes the
//     probe's write in that slot, the heartbeat renews the leases it holds
//     and the breaker closes.
//
// The client is kept: the other masters' calls are on it, and go-redis
// drops a connection whose call timed out, so none is left stuck on a
// master that hung.
func (b *breaker) recoverNode() bool {
	r := b.r
	cc, ok := r.client.Load().c.(*redis.ClusterClient)
	if !ok { // not a cluster: cannot happen (node breakers are made for cluster clients)
		b.recovering.Store(false)
		return true
	}
	cc.ReloadState(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	moved, err := b.probeNode(ctx, cc, *b.failedKey.Load())
	cancel()
	switch {
	case moved != "":
		b.recovering.Store(false)
		b.open.Store(false)
		b.endMoved(moved)
		return true
	case err != nil:
		b.noteCause(err, false)
		if !isDial(err) {
			r.probed(err)
		}
		return false
	}
	b.close(r.clock())
	return true
}

// probeNode finds which master serves key's slot: another one's address
// (moved), or, when it is still b's, whether b takes the probe's write in
// that slot (err).
func (b *breaker) probeNode(ctx context.Context, cc *redis.ClusterClient, key string) (moved string, err error) {
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return "", err
	}
	if addr := node.Options().Addr; addr != b.node {
		return addr, nil
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", b.node) // a bare dial first, as recover's
	if err != nil {
		return "", err
	}
	conn.Close()
	// Written on this master's own connection: through the cluster client,
	// a write on a connection the client closed meanwhile (its map changed,
	// and this master left it) went to the new master and passed for this
	// one's answer (a hung master that failed over was logged as answering
	// again).
	if err := b.r.probeWrite(ctx, node, hashTag(key)+":_probe", node.Ping); err != nil {
		return "", err
	}
	if node, err := cc.MasterForKey(ctx, key); err == nil && node.Options().Addr != b.node {
		return node.Options().Addr, nil
	}
	return "", nil
}

// endMoved ends the outage of a master whose failed slot the master at
// addr serves now (a failover, a migration): its tenants' calls go there.
func (b *breaker) endMoved(addr string) {
	b.endOutageAs("no longer serves the slot that failed (" + addr + " does: a failover or a migration)")
	b.r.probed(nil)
}

// isDial reports whether err is a failed connect.
func isDial(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

func (r *Redis) probed(err error) {
	if r.opts.Probed != nil {
		r.opts.Probed(err)
	}
}

// probeKey is the key the recovery probe writes: under the key prefix, in
// no tenant's namespace (a tenant's name starts with a letter or a digit).
func (r *Redis) probeKey() string { return "{" + r.prefix + ":_probe}:r" }

// probeWrite asks c for what an admission needs: it runs the admission
// script on the probe's own key, with a request limit that always has room
// (1 µs per request, a second of burst), so that Redis writes that key, for
// a second. An answer to PING is not enough: Redis answers it, and every
// read, while it takes no writes (CLIENT PAUSE WRITE, which a manual
// FAILOVER sets), and every admission then failed while the probe ended
// the outage every few hundred milliseconds.
//
// A Redis whose ACL lets the gateway write the tenants' keys but not the
// probe's (NOPERM) would keep the breaker open for good, the tenants'
// admissions never asked again: the probe then asks for PING, as it did
// before it wrote (a write pause then ends the outage early again), and
// says once what to grant.
func (r *Redis) probeWrite(ctx context.Context, c redis.UniversalClient, key string, ping func(context.Context) *redis.StatusCmd) error {
	res, err := admitScript.Run(ctx, c, []string{key},
		r.nowArg(r.clock()), "", "0", "0", "", "r", "1", "1000000").Slice()
	if err != nil && redis.HasErrorPrefix(err, "NOPERM") {
		if r.nopermSaid.CompareAndSwap(false, true) {
			r.logf("WARNING: ratelimit: redis %v refuses the gateway's write to its probe key %s (%v): let the gateway's user write it (as it writes the tenants' keys); until then the end of an outage is found by PING, which Redis also answers while it takes no writes", r.addrs, key, err)
		}
		return ping(ctx).Err()
	}
	if err != nil {
		return err
	}
	if len(res) == 0 || res[0] != int64(1) {
		return errBadReply
	}
	return nil
}
