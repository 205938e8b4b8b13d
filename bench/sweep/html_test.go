package sweep

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// sample is a sweep with a knee at step 4 (rate 8), latencies that climb
// past it, an unknown figure and hostile text in the label.
func sample() *Sweep {
	x := []float64{1, 2, 4, 6, 8, 16}
	g := []float64{1, 2, 3.95, 5.5, 5.6, 2.1}
	steps := curve(RequestRate, x, g, []float64{1, 1, 0.995, 0.992, 0.97, 0.4})
	for i := range steps {
		st := &steps[i]
		st.TTFT = Pct{Num(40 + 10*float64(i)), Num(90 * math.Pow(4, float64(i)))}
		st.ITL = Pct{Num(30 + float64(i)), Num(45 + 5*float64(i))}
		st.TPOT = Pct{Num(31), Unknown}
		st.E2EL = Pct{Num(4000), Num(9000)}
		st.OutputThroughput = 128 * st.RequestThroughput
	}
	steps[5].Error = "stopped early: <deadline> & more"
	s := &Sweep{
		Ladder: "request-rate=1,2,4,6,8,16", Kind: RequestRate, SLO: "ttft:200 tpot:50", Date: "2026-12-02T21:00:00Z",
		Label: LabelFields{Engine: `vllm <b>"x"</b> & y`, Precision: "fp16", GPUs: "1", TP: "1", ISL: "128 (mean)", OSL: "128 (mean)",
			Load: "open loop, request-rate 1 to 16 req/s", Percentile: "p50, p99", Goodput: "ttft:200 tpot:50, objective 99%"}.String(),
		Steps: steps,
	}
	s.Knee = FindKnee(steps, Rule{Objective: 0.99})
	return s
}

// element is a parsed XML element: name, attributes and text.
type element struct {
	name  string
	attrs map[string]string
	text  string
}

// parseXML parses the page strictly as XML (every element closed, entities
// known) and returns its elements in document order.
func parseXML(t *testing.T, page []byte) []*element {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(page))
	d.Strict = true
	var out, stack []*element
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the page is not well-formed XML: %v", err)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			e := &element{name: tk.Name.Local, attrs: map[string]string{}}
			for _, a := range tk.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
			stack = append(stack, e)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			for _, e := range stack {
				e.text += string(tk)
			}
		}
	}
	return out
}

func TestHTMLReport(t *testing.T) {
	s := sample()
	if !s.Knee.Found || s.Knee.Index != 4 {
		t.Fatalf("sample knee %d, want 4: %s", s.Knee.Index, s.Knee.Note)
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, s); err != nil {
		t.Fatal(err)
	}
	page := buf.Bytes()
	els := parseXML(t, page)

	lower := strings.ToLower(string(page))
	if strings.Contains(lower, "<script") {
		t.Error("the page has a script")
	}
	if n := strings.Count(lower, `xmlns="http://www.w3.org/2000/svg"`); n != 2 {
		t.Errorf("%d SVG namespaces, want 2 (two charts)", n)
	}
	if strings.Contains(strings.ReplaceAll(lower, `xmlns="http://www.w3.org/2000/svg"`, ""), "http") {
		t.Error("the page names an http resource")
	}
	for _, e := range els {
		for _, a := range []string{"href", "src"} {
			if _, ok := e.attrs[a]; ok {
				t.Errorf("<%s> has a %s attribute", e.name, a)
			}
		}
	}
	if strings.Contains(string(page), "<b>") {
		t.Error("the label's markup was not escaped")
	}

	// The label is the subtitle, every field present, unknown ones said.
	var meta, note string
	for _, e := range els {
		if e.name == "p" && e.attrs["class"] == "meta" && meta == "" {
			meta = e.text
		}
		if e.attrs["id"] == "knee-note" {
			note = e.text
		}
	}
	for _, want := range []string{`engine vllm <b>"x"</b> & y`, "version unknown", "precision fp16", "gpus 1", "tp 1", "ISL 128 (mean)", "OSL 128 (mean)", "open loop, request-rate 1 to 16 req/s", "percentile p50, p99", "goodput ttft:200 tpot:50, objective 99%"} {
		if !strings.Contains(meta, want) {
			t.Errorf("subtitle %q lacks %q", meta, want)
		}
	}
	if note != s.Knee.Note || !strings.Contains(note, "knee at request-rate 8 req/s") {
		t.Errorf("knee note %q", note)
	}

	// The knee marker: one line, at step 4, at the x of step 4's axis label.
	var knee *element
	labelX := map[string]string{}
	for _, e := range els {
		if e.attrs["id"] == "knee" {
			if knee != nil {
				t.Error("two knee markers")
			}
			knee = e
		}
		if e.name == "text" && e.attrs["data-step"] != "" {
			labelX[e.attrs["data-step"]] = e.attrs["x"]
		}
	}
	if knee == nil || knee.name != "line" {
		t.Fatalf("no knee marker line: %v", knee)
	}
	if knee.attrs["data-step"] != "4" || knee.attrs["x1"] != labelX["4"] || knee.attrs["x2"] != labelX["4"] {
		t.Errorf("knee marker at step %s x %s, want step 4 at x %s", knee.attrs["data-step"], knee.attrs["x1"], labelX["4"])
	}
	if len(labelX) != len(s.Steps) {
		t.Errorf("%d x axis labels, want %d", len(labelX), len(s.Steps))
	}

	// Every step has its row, in order, with its load; the knee's is marked.
	var rows []*element
	for _, e := range els {
		if e.name == "tr" && e.attrs["data-step"] != "" {
			rows = append(rows, e)
		}
	}
	if len(rows) != len(s.Steps) {
		t.Fatalf("%d step rows, want %d", len(rows), len(s.Steps))
	}
	for i, r := range rows {
		if r.attrs["data-step"] != strconv.Itoa(i) || !strings.Contains(r.text, fmtLoad(RequestRate, s.Steps[i].Load)) {
			t.Errorf("row %d: step %s, text %q", i, r.attrs["data-step"], r.text)
		}
		if (r.attrs["class"] == "knee") != (i == 4) {
			t.Errorf("row %d: class %q", i, r.attrs["class"])
		}
	}
	if !strings.Contains(rows[5].text, "stopped early: <deadline> & more") {
		t.Errorf("row 5 lacks its error: %q", rows[5].text)
	}
	// Every line has a point per step (6 lines; TPOT is not charted).
	pts := 0
	for _, e := range els {
		if e.name == "circle" {
			pts++
		}
	}
	if pts != 6*len(s.Steps) {
		t.Errorf("%d points, want %d", pts, 6*len(s.Steps))
	}
	// The SLO's TTFT bound is drawn on the latency axis.
	found := false
	for _, e := range els {
		found = found || (e.name == "text" && e.text == "TTFT bound 200 ms")
	}
	if !found {
		t.Error("no TTFT bound line")
	}
	// The attainment chart: a column per step, red below the objective
	// (steps 5 and 6: 97% and 40%), the knee at step 4 as above.
	var cols []*element
	kneeLines := 0
	for _, e := range els {
		if e.name == "rect" && e.attrs["data-step"] != "" {
			cols = append(cols, e)
		}
		if e.name == "line" && e.attrs["data-step"] == "4" {
			kneeLines++
		}
	}
	if len(cols) != len(s.Steps) {
		t.Fatalf("%d attainment columns, want %d", len(cols), len(s.Steps))
	}
	for i, c := range cols {
		red := c.attrs["fill"] == colBad
		if c.attrs["data-step"] != strconv.Itoa(i) || red != (i >= 4) || !strings.Contains(c.text, fmtPct(s.Steps[i].Attainment)) {
			t.Errorf("attainment column %d: %v %q", i, c.attrs, c.text)
		}
	}
	if kneeLines != 2 {
		t.Errorf("%d knee lines, want one per chart", kneeLines)
	}
}

// A sweep without a knee has no marker; one with unknown latencies and no
// steps still renders well-formed.
func TestHTMLReportEdges(t *testing.T) {
	s := sample()
	s.Steps = s.Steps[:3]
	s.Knee = FindKnee(s.Steps, Rule{})
	if s.Knee.Found {
		t.Fatalf("unexpected knee: %s", s.Knee.Note)
	}
	for i := range s.Steps {
		s.Steps[i].TTFT, s.Steps[i].ITL = Pct{Unknown, Unknown}, Pct{Unknown, Unknown}
	}
	for _, sw := range []*Sweep{s, {Ladder: "max-concurrency=1", Kind: MaxConcurrency, Label: LabelFields{}.String(), Knee: FindKnee(nil, Rule{})}} {
		var buf bytes.Buffer
		if err := WriteHTML(&buf, sw); err != nil {
			t.Fatal(err)
		}
		for _, e := range parseXML(t, buf.Bytes()) {
			if e.attrs["id"] == "knee" {
				t.Errorf("%s: a knee marker without a knee", sw.Ladder)
			}
		}
		if !strings.Contains(buf.String(), "no knee") {
			t.Errorf("%s: the page does not say there is no knee", sw.Ladder)
		}
	}
	if got := (LabelFields{}).String(); strings.Count(got, "unknown") != 10 {
		t.Errorf("empty label %q: want 10 unknown fields", got)
	}
}

func TestSweepJSON(t *testing.T) {
	s := sample()
	s.Steps[0].Load = Load(math.Inf(1)) // as a rate of inf would be
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"load":"inf"`, `"good_output_throughput":null`, `"p99":null`, `"request_goodput":1`, `"knee":{"found":true,"index":4,"load":8`, `"rule":{"min_gain":0.25,"objective":0.99}`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
	var back Sweep
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !math.IsInf(float64(back.Steps[0].Load), 1) || back.Steps[0].GoodOutputThroughput.Known() || back.Steps[1].RequestGoodput != 2 || back.Knee.Index != 4 {
		t.Errorf("round trip: %+v", back.Steps[0])
	}
}

func TestWriteTable(t *testing.T) {
	s := sample()
	var buf bytes.Buffer
	if err := WriteTable(&buf, s); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1+len(s.Steps)+2 {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), 1+len(s.Steps)+2, buf.String())
	}
	if !strings.Contains(lines[5], "knee") || strings.Contains(lines[4], "knee") {
		t.Errorf("the knee is not on step 5's row:\n%s", buf.String())
	}
	if !strings.HasPrefix(lines[len(lines)-1], "knee at request-rate 8 req/s") {
		t.Errorf("last line %q", lines[len(lines)-1])
	}
	if l := StepLine(&s.Steps[4], 4, 6); !strings.Contains(l, "step 5/6 request-rate 8 req/s") || !strings.Contains(l, "attainment 97%") {
		t.Errorf("step line %q", l)
	}
}
