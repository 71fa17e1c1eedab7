package eventqueue

import (
	"context"
	"strings"
	"testing"
	"time"
)

// BenchmarkLeaseAck is one consumer's lease + per-id ack of batches of 100 on the store alone
// (the Redis scripts the api runs, without HTTP); ns/op is per event.
func BenchmarkLeaseAck(b *testing.B) { benchLeaseAck(b, false) }

// BenchmarkLeaseBatchAck is BenchmarkLeaseAck with batch acks.
func BenchmarkLeaseBatchAck(b *testing.B) { benchLeaseAck(b, true) }

func benchLeaseAck(b *testing.B, batch bool) {
	r, store := fullQueue(b)
	ctx := context.Background()
	args := LeaseArgs{Limit: 100, Visibility: 30 * time.Second, MaxDeliveries: 10}
	r.Client().ConfigResetStat(ctx)
	n := 0
	var leaseT, ackT time.Duration
	for b.Loop() {
		if n%100 == 0 {
			if ln, _ := r.Client().LLen(ctx, Key(1)).Result(); ln < 200 {
				b.StopTimer()
				ev := []byte(`{"id":"` + strings.Repeat("x", 370) + `"}`)
				batch := make([][]byte, 1000)
				for i := range batch {
					batch[i] = ev
				}
				for range 10 {
					if err := store.Append(ctx, 1, batch...); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
			t0 := time.Now()
			res, err := store.Lease(ctx, 1, args)
			leaseT += time.Since(t0)
			if err != nil || len(res.Events) != 100 {
				b.Fatal(len(res.Events), err)
			}
			items := []AckItem{{Kind: KindBatch, LeaseID: res.BatchID}}
			if !batch {
				items = make([]AckItem, len(res.Events))
				for i, e := range res.Events {
					items[i] = AckItem{Kind: KindAck, LeaseID: e.LeaseID}
				}
			}
			t0 = time.Now()
			if _, _, err := store.Settle(ctx, 1, items, time.Second); err != nil {
				b.Fatal(err)
			}
			ackT += time.Since(t0)
		}
		n++
	}
	b.StopTimer()
	b.ReportMetric(float64(leaseT.Nanoseconds())/float64(n), "lease-ns/event")
	b.ReportMetric(float64(ackT.Nanoseconds())/float64(n), "ack-ns/event")
	info, _ := r.Client().Info(ctx, "commandstats").Result()
	for _, l := range strings.Split(info, "\n") {
		if strings.HasPrefix(l, "cmdstat_") {
			b.Log(strings.TrimSpace(l))
		}
	}
}
