package audit

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDirtySetTakesEveryMarkOnce(t *testing.T) {
	var nilSet *DirtySet
	nilSet.Mark(3) // a run without marks

	const n = 1000
	d := NewDirtySet(n)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 50; round++ {
		want := map[int]bool{}
		for k := rng.IntN(200); k > 0; k-- {
			i := rng.IntN(n)
			want[i] = true
			d.Mark(i)
			d.Mark(i)
		}
		var got []int
		marked := d.take(func(i int) { got = append(got, i) })
		require.True(t, slices.IsSorted(got))
		require.Len(t, got, len(want), "round %d", round)
		for i := 0; i < n; i++ {
			require.Equal(t, want[i], marked(i), "round %d partition %d", round, i)
		}
		d.take(func(i int) { t.Fatalf("partition %d taken twice", i) })
	}

	// Marks set while takes run are taken by one of the takes, never lost
	// and never twice.
	var wg sync.WaitGroup
	const writers, each = 4, 20000
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < each; k++ {
				d.Mark((w*each + k) % n)
			}
		}()
	}
	seen := make([]int, n)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		d.take(func(i int) { seen[i]++ })
	}
	d.take(func(i int) { seen[i]++ })
	for i, c := range seen {
		require.GreaterOrEqual(t, c, 1, "partition %d never taken", i)
	}
}

func TestSweepReadsEveryPartitionWithinItsCycle(t *testing.T) {
	require.Equal(t, 64, sweepCycle(0, 2*time.Second), "no retention: 64 passes")
	require.Equal(t, 64, sweepCycle(time.Hour, 2*time.Second))
	require.Equal(t, 3, sweepCycle(30*time.Second, 2*time.Second), "a quarter of 30 s is 3 passes of 2 s")
	require.Equal(t, 1, sweepCycle(30*time.Second, 10*time.Second))
	for _, tc := range []struct{ parts, cycle, want int }{
		{10, 64, 10}, {64, 64, 64}, {1000, 64, 64}, {1_000_000, 64, 15_625}, {1_000_000, 3, 333_334}, {100, 1, 100},
	} {
		n := sweepSlice(tc.parts, tc.cycle)
		require.Equal(t, tc.want, n, "%d partitions, cycle %d", tc.parts, tc.cycle)
		require.GreaterOrEqual(t, n*tc.cycle, tc.parts, "every partition within the cycle")
	}
}
