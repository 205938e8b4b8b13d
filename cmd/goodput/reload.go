package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/goodput/goodput/export"
	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/internal/regfile"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/slo"
)

// reloader acts on SIGHUP, which never ends the process: it reopens the
// request log (logrotate's convention: the file may have been moved away)
// and re-reads the tenants (keys, limits, SLO classes) when tenants are
// configured. It also reloads the tenants when the configuration or tenants
// file changes. A reload that fails keeps the previous tenants and logs why;
// in-flight requests are never touched (they hold the key and tenant they
// were admitted with). Other settings take effect at the next start.
type reloader struct {
	cfg    *config.Config
	store  *identity.Store // nil: no tenants, nothing to reload but the log
	judger *slo.Judger
	labels *export.LabelSet
	reqLog *export.RequestLog // nil: no request log
	logger *log.Logger
	// interval is how often the files are polled; zero means 1s.
	interval time.Duration
	// reloaded, if not nil, hears the result of every reload (tests).
	reloaded func(error)
	// reloading, if not nil, is called as each tenants reload starts, before it reads the files
	// (tests hold a reload there).
	reloading func()
	// polled, if not nil, is called after each poll of a file watched,
	// and changedHook as a watch finds a change to load (tests).
	polled, changedHook func()
	// judgePublished, if not nil, is called between the judge's publish of
	// a reload and the key store's (tests begin a request there).
	judgePublished func()

	// seen holds, per file watched, the content the last reload read, so
	// that the watch does not load again what a SIGHUP has loaded. Set by
	// run before any reload.
	seen map[string]*identity.Seen
	// read holds each watched file's content as the last reload read it,
	// and readOK that this reload succeeded: a SIGHUP that finds every file
	// so loads nothing. Used by the reload goroutine alone.
	read   map[string][sha256.Size]byte
	readOK bool

	wg sync.WaitGroup
}

// wait returns once the reloader's goroutines have stopped (after ctx ends).
func (r *reloader) wait() { r.wg.Wait() }

// start handles the SIGHUPs delivered on hup (the caller registered it
// with signal.Notify as early as it could: a SIGHUP that arrives before
// must not take the process's default action, which is to exit) until ctx
// ends.
func (r *reloader) start(ctx context.Context, hup <-chan os.Signal) {
	r.wg.Add(1)
	go r.run(ctx, hup)
}

func (r *reloader) run(ctx context.Context, hup <-chan os.Signal) {
	defer r.wg.Done()
	changed := make(chan struct{}, 1)
	poke := func() error {
		if r.changedHook != nil {
			r.changedHook()
		}
		signalOne(changed)
		return nil
	}
	// Tenants reload on a goroutine of their own, so that a SIGHUP reopens
	// the request log at once even while one runs (with tens of thousands
	// of tenants a reload takes tens of seconds, and logrotate's SIGHUP
	// waited for it, and for each one queued before it). A reload asked
	// for while one runs is one more after it, which reads the file then.
	want := make(chan struct{}, 1)
	// A SIGHUP's reload: skipped when the files are as the last reload read
	// them. An edit followed by a SIGHUP was loaded twice when the watch saw
	// the edit first (a poll a second, so one SIGHUP in two): by the
	// watch, and by the SIGHUP again (tens of seconds each with 20,000
	// tenants). The other way round, the watch takes as loaded what a
	// SIGHUP read (Seen).
	hupWant := make(chan struct{}, 1)
	if r.store != nil {
		r.seen = map[string]*identity.Seen{}
		for _, path := range []string{r.cfg.Path, r.cfg.TenantsFile} {
			if path != "" {
				r.seen[path] = new(identity.Seen)
			}
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-want:
					// select picks at random between a reload asked for and
					// the shutdown: none starts once the shutdown has (a
					// review saw 13 of 20 start one, with tens of seconds
					// to run).
					if ctx.Err() == nil {
						r.reloadTenants()
					}
				case <-hupWant:
					switch {
					case ctx.Err() != nil:
					case r.unchanged():
						r.logger.Printf("SIGHUP: the tenants are as the last reload loaded them (%s unchanged since): not reloaded again", strings.Join(slices.Sorted(maps.Keys(r.seen)), ", "))
					default:
						r.reloadTenants()
					}
				}
			}
		}()
		for path, seen := range r.seen {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				identity.FileWatch{Path: path, Interval: r.interval, Seen: seen, Load: poke, Polled: r.polled,
					Unsettled: func() {
						r.logger.Printf("%s has changed at each of the last %d polls: a change is loaded once it has stayed the same for one poll, and nothing is loaded while it keeps changing", path, identity.UnsettledPolls)
					},
					Gone: func() {
						r.logger.Printf("WARNING: %s is gone: the tenants and keys loaded stay until it is there again (a reload now fails)", path)
					},
				}.Run(ctx)
			}()
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if r.hangup() {
				signalOne(hupWant)
			}
		case <-changed:
			r.logger.Printf("configuration changed: reloading tenants")
			signalOne(want)
		}
	}
}

// signalOne sends on c unless a send is already pending.
func signalOne(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// hangup is SIGHUP: reopen the request log; it reports whether the tenants
// are to be reloaded.
func (r *reloader) hangup() (reloadTenants bool) {
	if r.reqLog == nil && r.store == nil {
		r.logger.Printf("SIGHUP: nothing to reload (no tenants, no request log); other settings take effect at restart")
		return false
	}
	if r.reqLog != nil {
		if err := r.reqLog.Reopen(); err != nil {
			r.logger.Printf("SIGHUP: could not reopen the request log, still writing to the file it had: %v", err)
		} else {
			r.logger.Printf("SIGHUP: request log reopened")
		}
	}
	if r.store != nil {
		r.logger.Printf("SIGHUP: reloading tenants")
		return true
	}
	return false
}

func (r *reloader) reloadTenants() {
	read := make(map[string][sha256.Size]byte, len(r.seen))
	for path, seen := range r.seen {
		if sum, ok := seen.Mark(path); ok { // before the reload reads it: see Seen.Mark
			read[path] = sum
		}
	}
	if r.reloading != nil {
		r.reloading() // a test holds the reload here, its files marked, not read
	}
	err := r.reload()
	r.read, r.readOK = read, err == nil && len(read) == len(r.seen)
	if err != nil {
		r.logger.Printf("reload failed, keeping the previous tenants: %v", err)
	}
	if r.reloaded != nil {
		r.reloaded(err)
	}
}

// unchanged reports whether every file watched is as the last reload,
// which succeeded, read it.
func (r *reloader) unchanged() bool {
	if !r.readOK || len(r.seen) == 0 {
		return false
	}
	for path := range r.seen {
		data, err := regfile.ReadFile(path)
		if err != nil || sha256.Sum256(data) != r.read[path] {
			return false
		}
	}
	return true
}

// reload applies the tenants of the configuration as it is now on disk.
// Settings other than tenants take effect at the next start.
func (r *reloader) reload() error {
	cfg, err := r.apply()
	// Its error may quote a key pasted into the wrong field: the new
	// files' digests find it.
	return cfg.RedactErr(err)
}

// apply is reload; it returns the configuration it read (nil if none).
func (r *reloader) apply() (*config.Config, error) {
	cfg := r.cfg
	var changed []string // settings of the file a reload does not apply
	if cfg.Path != "" {
		fresh, err := config.Reload(cfg.Path)
		if err != nil {
			return nil, err // redacted by Reload
		}
		if fresh.TenantsFile != cfg.TenantsFile || (len(fresh.Tenants) > 0) != (len(cfg.Tenants) > 0) {
			return fresh, errors.New("tenants and tenants_file can only be switched between at restart")
		}
		// Only the tenants are applied; a setting edited beside them
		// would otherwise be dropped without a word.
		changed = restartOnly(cfg.AsRead(), fresh)
		if len(changed) > 0 {
			r.logger.Printf("WARNING: reload: %s changed in the file; a reload applies the tenants alone, and these take effect at the next start", strings.Join(changed, ", "))
		}
		// Classes come from the running configuration: new classes need a
		// restart, as the counters and rules are built from them.
		fresh.SLO, fresh.DefaultSLO = cfg.SLO, cfg.DefaultSLO
		cfg = fresh
	}
	tenants, err := cfg.LoadTenants()
	if err != nil {
		return cfg, err
	}
	if len(tenants) == 0 {
		return cfg, errors.New("the new configuration has no tenants: every key would stop working")
	}
	if err := config.CheckTenantClasses(tenants, r.cfg.SLO.SLOs, r.cfg.DefaultSLO); err != nil {
		if slices.Contains(changed, "slos") || slices.Contains(changed, "default_slo") {
			err = fmt.Errorf("%w (the gateway judges by the classes it started with: classes added to slos take effect at the next start)", err)
		}
		return cfg, err
	}
	if err := ratelimit.ValidateTenants(tenants); err != nil {
		return cfg, err
	}
	// Every part checks the new configuration before any publishes it, and
	// all publish only once all have accepted it, so that no request begins
	// with a part of a configuration that is then refused. They publish in
	// this order: the label values (the judge exports its objectives under
	// them; those listed in labels: tenants stay, a restart changes them),
	// the judge, the store's limiters, and the keys last, so that a new
	// key works only once every part knows its tenant.
	publishJudge, err := r.judger.PrepareTenants(config.TenantClasses(tenants))
	if err != nil {
		return cfg, err
	}
	err = r.store.Reload(tenants, func() {
		if len(r.cfg.Labels.Tenants) == 0 {
			r.labels.SetConfigured(tenantNames(tenants))
		}
		publishJudge()
		if r.judgePublished != nil {
			r.judgePublished()
		}
	})
	if err != nil {
		return cfg, err
	}
	r.logger.Printf("reloaded: %d tenants, %d keys", len(tenants), r.store.Keyring().Len())
	for _, w := range append(labelsNote(r.cfg.Labels.Tenants, tenants), cfg.KeysFileWarnings()...) {
		r.logger.Print(cfg.RedactKeys(w)) // labels: tenants may quote a key pasted there
	}
	return cfg, nil
}

// restartOnly names the settings of fresh, as the file spells them, that
// differ from those running: every one but the tenants (tenants,
// tenants_file), which a reload applies. It names them only: a value may
// hold a secret.
func restartOnly(running, fresh *config.Config) []string {
	var names []string
	var walk func(a, b reflect.Value)
	walk = func(a, b reflect.Value) {
		t := a.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			switch {
			case opts == "inline" && f.Type.Kind() == reflect.Struct:
				walk(a.Field(i), b.Field(i))
				continue
			case name == "" || name == "-" || name == "tenants" || name == "tenants_file":
				continue
			}
			if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
				names = append(names, name)
			}
		}
	}
	walk(reflect.ValueOf(running).Elem(), reflect.ValueOf(fresh).Elem())
	return names
}
