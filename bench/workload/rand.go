package workload

import (
	"math"
	"math/rand/v2"
)

// Streams keep the random numbers of different uses independent for one
// seed: the arrival times do not change when the workload does.
const (
	streamArrivals uint64 = 0x6172726976616c73 // "arrivals"
	streamLengths  uint64 = 0x6c656e6774687321 // "lengths!"
	streamDataset  uint64 = 0x6461746173657421 // "dataset!"
	streamText     uint64 = 0x746578742d746578 // "text-tex"
)

// newRand returns a PCG generator for the seed and a stream.
func newRand(seed int64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), stream))
}

// gamma draws from a gamma distribution of shape k and scale 1
// (Marsaglia and Tsang, "A simple method for generating gamma variables",
// 2000; for k < 1 the boost Gamma(k) = Gamma(k+1)·U^(1/k)).
func gamma(r *rand.Rand, k float64) float64 {
	boost := 1.0
	if k < 1 {
		u := r.Float64()
		for u == 0 {
			u = r.Float64()
		}
		boost = math.Pow(u, 1/k)
		k++
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		var x, v float64
		for {
			x = r.NormFloat64()
			v = 1 + c*x
			if v > 0 {
				break
			}
		}
		v = v * v * v
		u := r.Float64()
		x2 := x * x
		if u < 1-0.0331*x2*x2 || (u > 0 && math.Log(u) < 0.5*x2+d*(1-v+math.Log(v))) {
			return d * v * boost
		}
	}
}

// mix64 is the splitmix64 finaliser: a cheap, well-distributed hash.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
