package report

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Markdown writes the report as Markdown (GitHub-flavoured tables).
func (r *Report) Markdown(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# %s\n\n", mdText(r.title()))
	fmt.Fprintf(bw, "%s · %s · generated %s\n", mdText(r.periodText()), mdText(r.sourceText()), fmtTime(r.GeneratedAt))
	for _, s := range r.sections() {
		fmt.Fprintf(bw, "\n## %s\n", s.Title)
		for _, p := range s.Text {
			fmt.Fprintf(bw, "\n%s\n", mdText(p))
		}
		if len(s.KVs) > 0 {
			fmt.Fprintf(bw, "\n| | |\n|---|---|\n")
			for _, kv := range s.KVs {
				fmt.Fprintf(bw, "| %s | %s |\n", mdCell(kv.K), mdCell(kv.V))
			}
		}
		for _, t := range s.Tables {
			if t.Caption != "" {
				fmt.Fprintf(bw, "\n%s:\n", mdText(t.Caption))
			}
			fmt.Fprintf(bw, "\n| %s |\n|", strings.Join(mapStrings(t.Head, mdCell), " | "))
			for i := range t.Head {
				if i == 0 {
					bw.WriteString("---|")
				} else {
					bw.WriteString("---:|")
				}
			}
			bw.WriteString("\n")
			for _, row := range t.Rows {
				fmt.Fprintf(bw, "| %s |\n", strings.Join(mapStrings(row, mdCell), " | "))
			}
		}
		if len(s.Bullets) > 0 {
			bw.WriteString("\n")
			for _, b := range s.Bullets {
				fmt.Fprintf(bw, "- %s\n", mdText(b))
			}
		}
	}
	return bw.Flush()
}

// mdText keeps free text from starting Markdown constructs: HTML, and the
// characters of links, images, emphasis and code, which a tenant or a
// model named by a client (through a permissive engine) could otherwise
// turn into a live link in a shared report (a new user's probe). So are
// GitHub's literal autolinks (GFM's extended autolinks): the ':' of a
// "://" and the '.' of a "www." are escaped, so that a model named
// "https://evil.example/login" or "www.evil.example" is text, not a link
// (cmark-gfm and goldmark find those while they read the inline text, where
// an escaped character is no longer one a link can start from). An
// e-mail address is still linked (mailto:) by cmark-gfm, which finds them
// in the text once read, escapes undone.
func mdText(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return mdEscaper.Replace(escapeRefs(s))
}

// escapeRefs writes as "&amp;" each "&" that may begin a character
// reference (&#x202e;, &lt;), which a renderer decodes: a model
// "a&#x202e;evil", a valid label (it is ASCII), showed as "alive", as the
// bidi override the labels refuse. Any other "&" stays as it is.
func escapeRefs(s string) string {
	if !strings.Contains(s, "&") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteByte(s[i])
		if s[i] == '&' && i+1 < len(s) && (s[i+1] == '#' || 'a' <= s[i+1]|0x20 && s[i+1]|0x20 <= 'z') {
			b.WriteString("amp;")
		}
	}
	return b.String()
}

var mdEscaper = strings.NewReplacer(append([]string{"<", "&lt;", ">", "&gt;", "\\", "\\\\", "`", "\\`", "*", "\\*", "_", "\\_", "[", "\\[", "]", "\\]", "~", "\\~",
	"://", `\://`}, wwwDots()...)...)

// wwwDots returns the replacement pairs of "www." in every case
// ("www.", "WWW.", "wWw.", ...) by the same with its '.' escaped.
func wwwDots() []string {
	var pairs []string
	for m := 0; m < 8; m++ {
		w := []byte("www")
		for i := range w {
			if m&(1<<i) != 0 {
				w[i] = 'W'
			}
		}
		pairs = append(pairs, string(w)+".", string(w)+`\.`)
	}
	return pairs
}

func mapStrings(in []string, f func(string) string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = f(s)
	}
	return out
}
