package export

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/goodput/goodput/meter"
)

func TestLabelSetConfigured(t *testing.T) {
	s := NewLabelSet([]string{"acme", "beta"}, 0)
	for in, want := range map[string]string{"acme": "acme", "beta": "beta", "gamma": Other, "": Other} {
		if got := s.Value(in); got != want {
			t.Errorf("Value(%q) = %q, want %q", in, got, want)
		}
		if got := s.Final(in, true); got != want {
			t.Errorf("Final(%q, accepted) = %q, want %q", in, got, want)
		}
	}
}

func TestLabelSetFirstComeBounded(t *testing.T) {
	s := NewLabelSet(nil, 3)
	for i := 0; i < 3; i++ {
		if v := fmt.Sprint("m", i); s.Final(v, true) != v {
			t.Fatalf("%s not admitted", v)
		}
	}
	if got := s.Final("m3", true); got != Other {
		t.Fatalf("fourth value admitted as %q", got)
	}
	if got, tentative := s.Live("m3"); got != Other || tentative {
		t.Fatalf("Live of a fourth value: %q tentative %v", got, tentative)
	}
	if got := s.Value("m1"); got != "m1" {
		t.Fatalf("admitted value lost: %q", got)
	}
}

// Values of requests the engine refused never take a slot: 32 bogus model
// names (404) left the real model its label (issue: they pushed it into
// "other").
func TestLabelSetSlotsOnlyForAcceptedValues(t *testing.T) {
	s := NewLabelSet(nil, 32)
	for i := 0; i < 32; i++ {
		v := fmt.Sprint("bogus-", i)
		if l, tentative := s.Live(v); l != v || !tentative {
			t.Fatalf("Live(%q) = %q, %v: want the value, tentatively", v, l, tentative)
		}
		if got := s.Final(v, false); got != Other {
			t.Fatalf("a refused request's value %q got label %q", v, got)
		}
	}
	if got := s.Final("llama", true); got != "llama" {
		t.Fatalf("the real model after 32 refused ones: %q", got)
	}
	if got, tentative := s.Live("llama"); got != "llama" || tentative {
		t.Fatalf("Live(llama) after admission: %q tentative %v", got, tentative)
	}
	// Once admitted, a value keeps its label on refused requests too.
	if got := s.Final("llama", false); got != "llama" {
		t.Fatalf("admitted value on a refused request: %q", got)
	}
}

// A label value that is not valid UTF-8 is "other" everywhere (the
// Prometheus client panics on it), configured or not.
func TestLabelSetInvalidUTF8(t *testing.T) {
	for _, ctl := range []string{"m\x00", "a\nb", "\x1b[31mred", "del\x7f", "c1\u0085"} {
		if got := NewLabelSet(nil, 0).Final(ctl, true); got != Other {
			t.Errorf("a value with a control character became label %q", got)
		}
	}
	if got := NewLabelSet(nil, 0).Final("llama-3 · 8B", true); got != "llama-3 · 8B" {
		t.Errorf("a printable value became %q", got)
	}
	bad := "t\xff"
	for _, s := range []*LabelSet{NewLabelSet(nil, 0), NewLabelSet([]string{bad, "ok"}, 0)} {
		if got := s.Value(bad); got != Other {
			t.Errorf("Value = %q", got)
		}
		if got, tent := s.Live(bad); got != Other || tent {
			t.Errorf("Live = %q %v", got, tent)
		}
		if got := s.Final(bad, true); got != Other {
			t.Errorf("Final = %q", got)
		}
	}
	l := NewLabeler(NewLabelSet(nil, 0), NewLabelSet(nil, 0))
	rec := &meter.Record{Tenant: bad, Model: "m\xfe", Status: 200}
	l.Begin(rec)
	l.End(rec)
	if rec.Live.Labels != (meter.Labels{Tenant: Other, Model: Other}) || rec.Labels != rec.Live.Labels {
		t.Fatalf("labels %+v live %+v", rec.Labels, rec.Live.Labels)
	}
	if got := l.Tenant(bad); got != Other {
		t.Fatalf("Tenant = %q", got)
	}
}

// A value with an invisible character (a format character: bidi overrides
// and isolates, zero-width spaces, the byte-order mark, tags; a line or
// paragraph separator; a Hangul filler) is "other", as one with a control
// character is, configured or not: "a\u202eevil" showed as "alive" on the
// live page (found by an operator-side probe). Visible characters beyond
// ASCII are kept, and so are the joiners and the variation selectors,
// which real names hold and which change no character's place (found by a
// review: a Persian word with a ZWNJ, an emoji sequence, an ideographic
// variant were other).
func TestLabelSetInvisibleCharacters(t *testing.T) {
	for _, v := range []string{"a\u202eevil", "a\u2066b\u2069", "ac\u200bme", "\ufeffacme", "acme\U000e0041",
		"a\u2028b", "a\u2029b", "\u3164acme", "soft\u00adhyphen", "a\u061cb", "a\u2060b"} {
		if ValidLabel(v) {
			t.Errorf("ValidLabel(%+q) = true", v)
		}
		for _, s := range []*LabelSet{NewLabelSet(nil, 0), NewLabelSet([]string{v, "ok"}, 0)} {
			if got := s.Final(v, true); got != Other {
				t.Errorf("%+q became label %+q", v, got)
			}
		}
	}
	for _, v := range []string{"llama-3 · 8B", "qwen2.5-中文", "modèle-é", "🚀-model", "a b",
		"تیم\u200cفنی", "👩\u200d💻-assistant", "❤\ufe0f-model", "葛\U000e0100-model"} {
		if !ValidLabel(v) {
			t.Errorf("ValidLabel(%+q) = false", v)
		}
	}
}

// A value longer than MaxLabelBytes is "other", as an invalid one is,
// configured or not: a client naming a 1 MiB model (an engine that ignores
// the model answers it) put it in every series of every scrape. Real
// names, a local snapshot path served as the model among them, are kept.
func TestLabelSetLongValue(t *testing.T) {
	huge := strings.Repeat("m", 1<<20)
	snapshot := "/models/hub/models--meta-llama--Llama-3.1-8B-Instruct/snapshots/0e9e39f249a16976918f6564b8830bc894c89659"
	long200 := strings.Repeat("x", 200)
	at := strings.Repeat("y", MaxLabelBytes)
	over := at + "y"
	for _, s := range []*LabelSet{NewLabelSet(nil, 0), NewLabelSet([]string{huge, over, "ok"}, 0)} {
		for _, v := range []string{huge, over} {
			if got := s.Final(v, true); got != Other {
				t.Errorf("Final of a %d-byte value = %.20q…", len(v), got)
			}
			if got, tent := s.Live(v); got != Other || tent {
				t.Errorf("Live of a %d-byte value = %.20q… %v", len(v), got, tent)
			}
			if got := s.Value(v); got != Other {
				t.Errorf("Value of a %d-byte value = %.20q…", len(v), got)
			}
		}
	}
	s := NewLabelSet(nil, 0)
	for _, v := range []string{snapshot, long200, at} {
		if got := s.Final(v, true); got != v {
			t.Errorf("a %d-byte value became %q", len(v), got)
		}
	}
	if !ValidLabel(at) || ValidLabel(over) || ValidLabel(huge) {
		t.Errorf("ValidLabel: %d bytes %v, %d bytes %v", len(at), ValidLabel(at), len(over), ValidLabel(over))
	}
}

// A request's labels are chosen once: a second call (another sink) keeps
// them; a request without a model is "none".
func TestLabelerChoosesOnce(t *testing.T) {
	l := NewLabeler(NewLabelSet(nil, 1), NewLabelSet(nil, 0))
	rec := &meter.Record{Tenant: "acme", Status: 200}
	l.Begin(rec)
	if rec.Live.Tenant != "acme" || !rec.Live.TentativeTenant || rec.Live.Model != None {
		t.Fatalf("live %+v", rec.Live)
	}
	l.End(rec)
	if rec.Labels != (meter.Labels{Tenant: "acme", Model: None}) {
		t.Fatalf("labels %+v", rec.Labels)
	}
	// The only slot is taken: beta is other, and stays so for this request
	// even after a reload makes it a configured value.
	other := &meter.Record{Tenant: "beta", Status: 200}
	l.Begin(other)
	l.End(other)
	l.tenants.SetConfigured([]string{"beta"})
	l.Begin(other)
	l.End(other)
	if other.Labels.Tenant != Other || other.Live.Tenant != Other {
		t.Fatalf("labels %+v live %+v", other.Labels, other.Live)
	}
}

// A request whose model was not read (meter.Record.ModelUnread: a body
// cut short, refused unread) is "unread", in flight and at its end: not
// "none", the label of the requests that name no model, which are judged
// by another class. Both are reserved model labels.
func TestLabelerModelUnread(t *testing.T) {
	l := NewLabeler(NewLabelSet(nil, 0), NewLabelSet(nil, 0))
	for _, c := range []struct {
		rec  meter.Record
		want string
	}{
		{meter.Record{Tenant: "acme", Route: "chat", Status: 408, ModelUnread: true}, Unread},
		{meter.Record{Tenant: "acme", Route: "chat", Status: 200}, None},
		{meter.Record{Tenant: "acme", Route: "chat", Status: 200, UpstreamStatus: 200, Model: "llama"}, "llama"},
	} {
		rec := c.rec
		l.Begin(&rec)
		l.End(&rec)
		if rec.Live.Model != c.want || rec.Labels.Model != c.want {
			t.Errorf("model %q, unread %v: live %q, labels %q; want %q", c.rec.Model, c.rec.ModelUnread, rec.Live.Model, rec.Labels.Model, c.want)
		}
	}
	if !Reserved(Unread, true) || !Reserved(None, true) || Reserved(Unread, false) {
		t.Errorf("reserved: unread %v (tenant %v), none %v", Reserved(Unread, true), Reserved(Unread, false), Reserved(None, true))
	}
}

// A request that names a model called "unread" or "none" (the labels of
// the requests whose model was not read, and of those that name none) or
// "other" is counted under "other": under its own name it would share
// those series, judged by other classes, and "other" would take a label
// slot. So whether the models' values are configured or come first served.
func TestLabelerModelNamedReserved(t *testing.T) {
	for _, configured := range [][]string{nil, {"llama"}} {
		models := NewLabelSet(configured, 1) // first served: one slot
		l := NewLabeler(NewLabelSet(nil, 0), models)
		for _, name := range []string{Unread, None, Other} {
			rec := meter.Record{Tenant: "acme", Route: "chat", Status: 200, UpstreamStatus: 200, Model: name}
			l.Begin(&rec)
			l.End(&rec)
			if rec.Live.Model != Other || rec.Live.TentativeModel || rec.Labels.Model != Other {
				t.Errorf("configured %q, model named %q: live %q (tentative %v), labels %q; want %q", configured, name, rec.Live.Model, rec.Live.TentativeModel, rec.Labels.Model, Other)
			}
		}
		if got := models.Final("mistral", true); configured == nil && got != "mistral" {
			t.Errorf("first served: a model after the reserved names got %q: they took its slot", got)
		}
	}
}

// Reloads replace the configured values while requests read them; run
// with -race (the issue: a reload wrote the set's fields while a request
// read them after releasing the read lock).
func TestLabelSetReloadRace(t *testing.T) {
	s := NewLabelSet(nil, 8)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				v := fmt.Sprint("v", (g*7+i)%12)
				s.Value(v)
				s.Live(v)
				s.Final(v, i%2 == 0)
			}
		}(g)
	}
	for i := 0; i < 2000; i++ {
		if i%2 == 0 {
			s.SetConfigured([]string{"v1", "v2"})
		} else {
			s.SetConfigured(nil)
		}
	}
	close(stop)
	wg.Wait()
	s.SetConfigured(nil)
	if got := s.Final("v9", true); got != "v9" {
		t.Fatalf("after the reloads (first come, first served): %q", got)
	}
}

// Which requests give their values a label slot: not one refused as the
// client's own mistake; for a model, only one the engine answered.
func TestLabelerAdmission(t *testing.T) {
	for _, c := range []struct {
		name               string
		outcome            meter.Outcome
		status, upstream   int
		wantTenant, wantMd bool
	}{
		{"engine 200", meter.OutcomeOK, 200, 200, true, true},
		{"engine 503 (still loading)", meter.OutcomeUpstreamError, 503, 503, true, true},
		{"engine 429", meter.OutcomeClientError, 429, 429, true, true},
		{"engine 404 (bogus model)", meter.OutcomeClientError, 404, 404, false, false},
		{"engine 400", meter.OutcomeClientError, 400, 400, false, false},
		{"gateway 400 (bad body)", meter.OutcomeRejected, 400, 0, false, false},
		{"gateway 502 (engine unreachable)", meter.OutcomeUpstreamError, 502, 0, true, false},
		{"gateway 429 (rate limited)", meter.OutcomeRateLimited, 429, 0, true, false},
		{"client gone before the first byte", meter.OutcomeClientAbort, meter.StatusClientClosed, 0, true, false},
	} {
		l := NewLabeler(NewLabelSet(nil, 0), NewLabelSet(nil, 0))
		rec := &meter.Record{Tenant: "acme", Model: "llama", Outcome: c.outcome, Status: c.status, UpstreamStatus: c.upstream}
		l.Begin(rec)
		l.End(rec)
		if got := rec.Labels.Tenant == "acme"; got != c.wantTenant {
			t.Errorf("%s: tenant label %q", c.name, rec.Labels.Tenant)
		}
		if got := rec.Labels.Model == "llama"; got != c.wantMd {
			t.Errorf("%s: model label %q", c.name, rec.Labels.Model)
		}
	}
}

// A reload that removes a tenant (or a model) while its request runs does
// not move the request to "other": it ends under the label it began with,
// in the metrics as in the request log (found by a soak test: 3 streams of
// a removed tenant counted as other).
func TestLabelerKeepsTheLabelARequestBeganWith(t *testing.T) {
	l := NewLabeler(NewLabelSet([]string{"delta"}, 0), NewLabelSet([]string{"llama"}, 0))
	rec := &meter.Record{Tenant: "delta", Model: "llama", Status: 200, UpstreamStatus: 200}
	l.Begin(rec)
	l.tenants.SetConfigured([]string{"acme"})
	l.models.SetConfigured([]string{"qwen"})
	l.End(rec)
	if rec.Labels != (meter.Labels{Tenant: "delta", Model: "llama"}) {
		t.Fatalf("labels %+v", rec.Labels)
	}
	// A request that begins after the reload is other.
	late := &meter.Record{Tenant: "delta", Model: "llama", Status: 200, UpstreamStatus: 200}
	l.Begin(late)
	l.End(late)
	if late.Labels != (meter.Labels{Tenant: Other, Model: Other}) {
		t.Fatalf("labels after the reload %+v", late.Labels)
	}
}

// pairRecord begins and ends a request of tenant and model the engine
// answered with status, and returns its labels.
func pairRecord(l *Labeler, tenant, model string, status int) (live meter.Live, labels meter.Labels) {
	rec := &meter.Record{Tenant: tenant, Model: model, Status: status, UpstreamStatus: status}
	if status >= 400 {
		rec.Outcome = meter.OutcomeClientError
	}
	l.Begin(rec)
	live = rec.Live
	l.End(rec)
	return live, rec.Labels
}

// Each label is bounded alone, and so are the pairs of a tenant and a
// model: a client naming 33 tenants and 33 models (an engine that ignores
// the model answers them all) made 1,089 pairs of about 210 series each.
// By default 4 times max_values (128) pairs have series of their own; a
// new pair past them counts under its tenant and the model "other", a
// pair with a model the gateway names itself is always allowed, a pair
// already admitted keeps its series, and a request the engine refused
// takes no pair.
func TestLabelerBoundsPairs(t *testing.T) {
	l := NewLabeler(NewLabelSet(nil, 0), NewLabelSet(nil, 0))
	if _, lb := pairRecord(l, "t0", "bogus", 404); lb.Model != Other {
		t.Fatalf("a refused request's labels %+v", lb)
	}
	own := map[meter.Labels]bool{}
	for i := 0; i < 33; i++ {
		for j := 0; j < 33; j++ {
			tenant, model := fmt.Sprintf("t%d", i), fmt.Sprintf("m%d", j)
			live, lb := pairRecord(l, tenant, model, 200)
			full, capped := len(own) >= 4*32, i >= 32 || j >= 32 // past a label's own 32
			switch {
			case capped:
				if lb.Model != Other && lb.Tenant != Other {
					t.Fatalf("%s/%s: labels %+v past a label's bound", tenant, model, lb)
				}
				if lb.Model != Other {
					own[lb] = true // tenant other, a model with a slot: a pair too
				}
			case lb.Tenant == Other || lb.Model == Other:
				if !full {
					t.Fatalf("%s/%s: labels %+v with %d pairs admitted", tenant, model, lb, len(own))
				}
				if lb.Tenant != Other && (live.Model != Other || live.TentativePair) {
					t.Fatalf("%s/%s: began as %+v with every pair taken", tenant, model, live)
				}
			default:
				if full {
					t.Fatalf("%s/%s: a pair of its own past the bound (%d)", tenant, model, len(own))
				}
				if !live.TentativePair {
					t.Fatalf("%s/%s: a new pair began as %+v, want tentative", tenant, model, live)
				}
				own[lb] = true
			}
		}
	}
	if len(own) != 4*32 {
		t.Fatalf("%d pairs of their own, want %d", len(own), 4*32)
	}
	for lb := range own {
		if live, got := pairRecord(l, lb.Tenant, lb.Model, 200); got != lb || live.TentativePair {
			t.Fatalf("an admitted pair %+v: labels %+v, began %+v", lb, got, live)
		}
		break
	}
	for _, model := range []string{"", "none"} {
		if _, lb := pairRecord(l, "t0", model, 200); lb.Model == Other && model == "" {
			t.Fatalf("no model past the bound: %+v, want none", lb)
		}
	}
}

// The bound follows the values admitted: with every tenant configured
// (gateway keys, thousands of tenants) each may have 4 models of its own;
// when tenants and models are both configured their pairs are bounded by
// the configuration, unless max_pairs is set.
func TestLabelerPairBoundFollowsTheConfiguration(t *testing.T) {
	tenants := make([]string, 100)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("tenant-%d", i)
	}
	l := NewLabeler(NewLabelSet(tenants, 0), NewLabelSet(nil, 0))
	n := 0
	for _, tenant := range tenants {
		for j := 0; j < 5; j++ {
			if _, lb := pairRecord(l, tenant, fmt.Sprintf("m%d", j), 200); lb.Model != Other {
				n++
			}
		}
	}
	if n != 400 {
		t.Fatalf("100 configured tenants: %d pairs of their own, want 400", n)
	}

	models := []string{"a", "b", "c", "d", "e"}
	l = NewLabeler(NewLabelSet(tenants, 0), NewLabelSet(models, 0))
	for _, tenant := range tenants {
		for _, m := range models {
			if _, lb := pairRecord(l, tenant, m, 200); lb.Model != m {
				t.Fatalf("configured %s/%s: labels %+v", tenant, m, lb)
			}
		}
	}
	l = NewLabeler(NewLabelSet(tenants, 0), NewLabelSet(models, 0))
	l.LimitPairs(3)
	n = 0
	for _, m := range models {
		if _, lb := pairRecord(l, "tenant-0", m, 200); lb.Model != Other {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("max_pairs 3: %d pairs of their own", n)
	}
}

// Under the default bound each configured tenant keeps 4 places of its
// own: four tenants of five (gateway keys), each naming 32 models to an
// engine that ignores the model, took all 128 places, and the fifth's
// first model counted under "other" (found by a review). Now the four
// take 128 - 4 and the fifth still has its 4; with max_pairs set, the
// bound is the operator's, first come.
func TestLabelerPairBoundKeepsEachConfiguredTenantsShare(t *testing.T) {
	tenants := []string{"t1", "t2", "t3", "t4", "t5"}
	l := NewLabeler(NewLabelSet(tenants, 0), NewLabelSet(nil, 0))
	own := 0
	for _, tenant := range tenants[:4] {
		for j := 0; j < 32; j++ {
			if _, lb := pairRecord(l, tenant, fmt.Sprintf("m%d", j), 200); lb.Model != Other {
				own++
			}
		}
	}
	if own != 128-4 {
		t.Fatalf("four tenants of 32 models: %d pairs of their own, want %d", own, 128-4)
	}
	for j := 0; j < 5; j++ {
		live, lb := pairRecord(l, "t5", fmt.Sprintf("m%d", j), 200)
		if want := j < 4; (lb.Model != Other) != want || (live.Model != Other) != want {
			t.Fatalf("t5's model %d: began %+v, labels %+v; its own: %v", j, live, lb, want)
		}
	}
	l = NewLabeler(NewLabelSet(tenants, 0), NewLabelSet(nil, 0))
	l.LimitPairs(6)
	for j := 0; j < 6; j++ {
		pairRecord(l, "t1", fmt.Sprintf("m%d", j), 200)
	}
	if _, lb := pairRecord(l, "t5", "m0", 200); lb.Model != Other {
		t.Fatalf("max_pairs 6, all taken by t1: t5 got %+v", lb)
	}
}

// A tenant a reload adds keeps its share too: five tenants of 32 models
// each took every place (the four places each one's share and the rest),
// and a sixth added then had none, its first model under "other".
func TestLabelerPairShareOfATenantAReloadAdds(t *testing.T) {
	tenants := []string{"t1", "t2", "t3", "t4", "t5"}
	set := NewLabelSet(tenants, 0)
	l := NewLabeler(set, NewLabelSet(nil, 0))
	for _, tenant := range tenants {
		for j := 0; j < 32; j++ {
			pairRecord(l, tenant, fmt.Sprintf("m%d", j), 200)
		}
	}
	set.SetConfigured(append(tenants, "t6"))
	for j := 0; j < 5; j++ {
		live, lb := pairRecord(l, "t6", fmt.Sprintf("m%d", j), 200)
		if want := j < 4; (lb.Model != Other) != want || (live.Model != Other) != want {
			t.Fatalf("t6's model %d, t6 added by a reload: began %+v, labels %+v; its own: %v", j, live, lb, want)
		}
	}
	if _, lb := pairRecord(l, "t1", "m99", 200); lb.Model != Other {
		t.Fatalf("t1, past its share with every place taken: labels %+v", lb)
	}
}

// A reload that replaces the tenants (gateway keys: the tenants' set is
// every tenant) frees the pairs of the tenants it removed: they kept their
// places, and past enough of them a configured tenant's models counted
// under "other" however few pairs the tenants configured now had. A
// request begun before the reload keeps the pair it began with.
func TestLabelerPairsFollowAReload(t *testing.T) {
	old := make([]string, 40)
	for i := range old {
		old[i] = fmt.Sprintf("old-%d", i)
	}
	tenants := NewLabelSet(old, 0)
	l := NewLabeler(tenants, NewLabelSet(nil, 0))
	for _, tenant := range old {
		for j := 0; j < 4; j++ {
			if _, lb := pairRecord(l, tenant, fmt.Sprintf("m%d", j), 200); lb.Model == Other {
				t.Fatalf("%s: labels %+v", tenant, lb)
			}
		}
	}
	running := &meter.Record{Tenant: "old-0", Model: "m0", Status: 200, UpstreamStatus: 200}
	l.Begin(running)
	tenants.SetConfigured([]string{"new-0", "new-1"})
	for _, tenant := range []string{"new-0", "new-1"} {
		for j := 0; j < 4; j++ {
			m := fmt.Sprintf("m%d", j)
			if live, lb := pairRecord(l, tenant, m, 200); lb.Model != m || live.Model != m {
				t.Fatalf("a configured tenant after the reload, %s/%s: began %+v, labels %+v", tenant, m, live, lb)
			}
		}
	}
	l.End(running)
	if running.Labels.Tenant != "old-0" || running.Labels.Model != "m0" {
		t.Fatalf("a request begun before the reload: labels %+v", running.Labels)
	}
}

// A model that holds its slot (listed in labels: models, or vouched for by
// the engine already) counts a request the gateway answered alone (engine
// unreachable, a 429) under its own name, as README promises ("list the
// models in labels: models for them to have their own series from the
// start"): its tenant-and-model pair takes its place with such a request
// too, as the tenant takes its slot. A model with no slot yet still needs
// the engine's answer.
func TestLabelerPairOfAModelWithASlotNeedsNoEngine(t *testing.T) {
	l := NewLabeler(NewLabelSet(nil, 0), NewLabelSet([]string{"llama"}, 0))
	for _, status := range []int{503, 429} {
		rec := &meter.Record{Tenant: fmt.Sprintf("acme-%d", status), Model: "llama", Status: status, Outcome: meter.OutcomeUpstreamError}
		if status == 429 {
			rec.Outcome = meter.OutcomeRateLimited
		}
		l.Begin(rec)
		l.End(rec)
		if rec.Labels.Model != "llama" || rec.Labels.Tenant != rec.Tenant {
			t.Fatalf("%d answered by the gateway, a listed model: labels %+v", status, rec.Labels)
		}
	}
	l = NewLabeler(NewLabelSet(nil, 0), NewLabelSet(nil, 0))
	if _, lb := pairRecord(l, "acme", "m", 200); lb.Model != "m" {
		t.Fatalf("labels %+v", lb)
	}
	rec := &meter.Record{Tenant: "beta", Model: "m", Status: 503, Outcome: meter.OutcomeUpstreamError}
	l.Begin(rec)
	l.End(rec)
	if rec.Labels.Model != "m" {
		t.Fatalf("503 answered by the gateway, a model the engine answered before: labels %+v", rec.Labels)
	}
	rec = &meter.Record{Tenant: "beta", Model: "new", Status: 503, Outcome: meter.OutcomeUpstreamError}
	l.Begin(rec)
	l.End(rec)
	if rec.Labels.Model != Other {
		t.Fatalf("503 answered by the gateway, a model nobody checked: labels %+v", rec.Labels)
	}
}
