package export

import "sync"

// Other is the label value that stands for every value not admitted.
const Other = "other"

// LabelSet bounds the values of one metric label (tenant, model): values
// from configuration are always admitted; when none are configured, the
// first Max distinct values seen are admitted, and anything else becomes
// "other", so a client cannot grow the number of series without limit.
type LabelSet struct {
	mu      sync.RWMutex
	allowed map[string]struct{}
	fixed   bool // only configured values are admitted
	max     int
}

// NewLabelSet returns a set that admits the configured values, or, when
// configured is empty, up to max values first come first served (max 0
// means 32).
func NewLabelSet(configured []string, max int) *LabelSet {
	if max <= 0 {
		max = 32
	}
	s := &LabelSet{allowed: make(map[string]struct{}, len(configured)), max: max}
	for _, v := range configured {
		s.allowed[v] = struct{}{}
	}
	s.fixed = len(configured) > 0
	return s
}

// SetConfigured replaces the configured values (a reload). An empty list
// switches to first come, first served.
func (s *LabelSet) SetConfigured(configured []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allowed = make(map[string]struct{}, len(configured))
	for _, v := range configured {
		s.allowed[v] = struct{}{}
	}
	s.fixed = len(configured) > 0
}

// Value returns v if it is admitted, else "other". An empty v is "other".
func (s *LabelSet) Value(v string) string {
	if v == "" {
		return Other
	}
	s.mu.RLock()
	_, ok := s.allowed[v]
	n := len(s.allowed)
	s.mu.RUnlock()
	if ok {
		return v
	}
	if s.fixed || n >= s.max {
		return Other
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.allowed[v]; ok {
		return v
	}
	if len(s.allowed) >= s.max {
		return Other
	}
	s.allowed[v] = struct{}{}
	return v
}
