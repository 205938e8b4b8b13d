package ratelimit

import (
	"context"
	"testing"

	"github.com/goodput/goodput/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// cluster is the three-node Redis Cluster of the cluster tests (run with
// GOODPUT_LONG_TESTS=1), started once for the package by the first of them.
var cluster = redistest.NewCluster(3)

// Every limiter, watcher and recovery probe must stop with its owner.
// go-redis's own dial prober (tryDial) sleeps up to a second before it sees
// its pool closed; it is not ours. Its log of dial failures is silenced: the
// failure tests provoke hundreds.
func TestMain(m *testing.M) {
	redis.SetLogger(quietRedisLog{})
	goleak.VerifyTestMain(redistest.RunThenClose(m, cluster), goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
