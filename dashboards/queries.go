package dashboards

import (
	"encoding/json"
	"regexp"
)

// A Panel is what a dashboard's JSON says about one panel: enough to run
// its queries.
type Panel struct {
	ID          int           `json:"id"`
	Type        string        `json:"type"`
	Title       string        `json:"title"`
	Description string        `json:"description"`
	Datasource  *DatasourceID `json:"datasource"`
	Targets     []Target      `json:"targets"`
	Panels      []Panel       `json:"panels"` // a collapsed row's panels
}

// DatasourceID is a panel's or variable's data source.
type DatasourceID struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// A Target is one query of a panel.
type Target struct {
	RefID   string `json:"refId"`
	Expr    string `json:"expr"`
	Instant bool   `json:"instant"`
	Format  string `json:"format"`
}

// A Variable is one of a dashboard's template variables.
type Variable struct {
	Type       string        `json:"type"`
	Name       string        `json:"name"`
	Query      any           `json:"query"`
	Datasource *DatasourceID `json:"datasource"`
	AllValue   string        `json:"allValue"`
	IncludeAll bool          `json:"includeAll"`
	Multi      bool          `json:"multi"`
}

// Parsed is a dashboard's JSON, as far as its queries go.
type Parsed struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Parse reads a dashboard's JSON.
func Parse(data []byte) (Parsed, error) {
	var p Parsed
	err := json.Unmarshal(data, &p)
	return p, err
}

// AllPanels returns every panel that is not a row, rows' panels included,
// in order.
func (p Parsed) AllPanels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, q := range ps {
			if q.Type == "row" {
				walk(q.Panels)
				continue
			}
			out = append(out, q)
		}
	}
	walk(p.Panels)
	return out
}

// varRef matches Grafana's variable syntaxes: $name, ${name},
// ${name:format} and [[name]].
var varRef = regexp.MustCompile(`\$(\w+)|\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]`)

// VariableNames returns the names of the variables s refers to, built-in
// ones ($__range, …) included, in order of appearance.
func VariableNames(s string) []string {
	var out []string
	for _, m := range varRef.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1]+m[2]+m[3])
	}
	return out
}

// Substitute replaces the references to the variables in values by their
// values, as Grafana does before it sends a query (values must already be
// formatted: a regex for a multi-value variable). Other references stay.
func Substitute(s string, values map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		if v, ok := values[m[1]+m[2]+m[3]]; ok {
			return v
		}
		return ref
	})
}
