package main

import (
	"strings"
	"testing"
)

// --capacity prints the step model's prediction for a preset and a
// workload, with flag overrides applied.
func TestSimCapacity(t *testing.T) {
	code, out, errOut := runCLI("sim", "--preset", "a100-8b", "--capacity", "1000,200")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"ISL 1000, OSL 200", "max concurrency: 256 (limited by max_num_seqs", "max rate: 17.185 requests/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Fewer slots: a lower knee.
	code, out, _ = runCLI("sim", "--preset", "a100-8b", "--max-num-seqs", "64", "--capacity", "1000,200")
	if code != 0 || !strings.Contains(out, "max concurrency: 64 (limited by max_num_seqs") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

func TestSimFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "fast"},
		{"--preset", "nope"},
		{"--capacity", "1000"},
		{"--capacity", "-1,5"},
		{"--capacity", "10,0"},
		{"--max-num-seqs", "4"},
		{"--mode", "linear", "--preset", "small-gpu"},
		{"--preset", "small-gpu", "--itl", "10ms"},
		{"--preset", "small-gpu", "--max-num-seqs", "0"},
		{"--preset", "small-gpu", "--max-num-batched-tokens", "8", "--max-num-seqs", "16"},
		{"extra"},
	} {
		code, out, errOut := runCLI(append([]string{"sim"}, args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, "goodput sim") && !strings.Contains(errOut, "flag") {
			t.Errorf("%v: exit %d, %q %q", args, code, out, errOut)
		}
	}
}
