package sweep

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the sweep's steps as a text table, the knee's row
// marked, then the knee's note.
func WriteTable(w io.Writer, s *Sweep) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(tableHead, "\t")+"\t")
	for i := range s.Steps {
		fmt.Fprintln(tw, strings.Join(stepCells(s, i), "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.Label != "" {
		fmt.Fprintln(w, "Label: "+s.Label)
	}
	_, err := fmt.Fprintln(w, s.Knee.Note)
	return err
}

// StepLine is a one-line summary of step i of n, printed as the sweep goes.
func StepLine(st *Step, i, n int) string {
	gp := fmtNum(st.RequestGoodput)
	if !st.RequestGoodput.Known() {
		gp = fmtRate(st.Goodput()) + " (no SLO: throughput)"
	}
	line := fmt.Sprintf("step %d/%d %s %s: %d completed, %d failed, %s req/s, goodput %s req/s, attainment %s, TTFT p50/p99 %s/%s ms, ITL p50/p99 %s/%s ms",
		i+1, n, st.Kind, fmtLoad(st.Kind, st.Load), st.Completed, st.Failed, fmtRate(st.RequestThroughput), gp, fmtPct(st.Attainment),
		fmtMs(st.TTFT.P50), fmtMs(st.TTFT.P99), fmtMs(st.ITL.P50), fmtMs(st.ITL.P99))
	if st.Error != "" {
		line += " (" + st.Error + ")"
	}
	return line
}
