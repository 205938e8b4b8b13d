//go:build !race

package slo

const raceEnabled = false
