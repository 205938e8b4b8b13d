// Command gen writes goodput's Grafana dashboards (package dashboards) as
// JSON files: `go generate ./dashboards`, or from the repository's root
// `go run ./dashboards/gen`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/goodput/goodput/dashboards"
)

func main() {
	out := flag.String("out", "dashboards", "folder to write the JSON files to")
	flag.Parse()
	for _, b := range dashboards.Boards() {
		data, err := b.JSON()
		if err == nil {
			err = os.WriteFile(filepath.Join(*out, b.File), data, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}
