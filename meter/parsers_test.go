package meter

// Parser is one API's parser: StreamParser with its API fixed, so that a
// test can hold any (the proxy passes the API to StreamParser.Parse).
type Parser interface {
	Reset()
	Parse(ev *Event, info *EventInfo) error
}

// apiParser is StreamParser with its API fixed.
type apiParser struct {
	api API
	p   StreamParser
}

func (a *apiParser) Reset()                                 { a.p.Reset() }
func (a *apiParser) Parse(ev *Event, info *EventInfo) error { return a.p.Parse(a.api, ev, info) }

func newParser(api API) *apiParser { return &apiParser{api: api} }
