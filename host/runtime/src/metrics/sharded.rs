//! Counters, gauges and histograms that every request updates, split into shards by thread.
//!
//! `prometheus-client`'s own metrics keep one atomic per value (a histogram, one lock):
//! when the reactor's threads answer requests side by side, each update moves that cache
//! line from one processor to the other. Here each thread adds into a shard of its own, on
//! a cache line of its own, and a scrape sums the shards. The values are encoded by
//! `prometheus-client`'s encoder, as its own metrics are.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Shards per metric. Threads take shards in turn; two threads that share one still count
/// right (the updates are atomic), they only share its cache line.
const SHARDS: usize = 8;

/// A value on a cache line of its own (128 bytes: the pair of lines x86 prefetches
/// together).
#[derive(Default)]
#[repr(align(128))]
struct Padded<T>(T);

/// A number of this thread's own: threads are numbered in the order they first ask.
pub(crate) fn thread_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    MINE.with(|m| {
        let k = m.get();
        if k != usize::MAX {
            return k;
        }
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        m.set(k);
        k
    })
}

/// This thread's shard.
fn shard() -> usize {
    thread_index() % SHARDS
}

/// Per-shard sums that a scrape adds up (wrapping, so a gauge's shards may hold negative
/// parts as two's complement).
#[derive(Clone, Default)]
struct Sums(Arc<[Padded<AtomicU64>; SHARDS]>);

impl Sums {
    fn add(&self, delta: u64) {
        self.0[shard()].0.fetch_add(delta, Ordering::Relaxed);
    }

    fn total(&self) -> u64 {
        self.0
            .iter()
            .fold(0, |t, s| t.wrapping_add(s.0.load(Ordering::Relaxed)))
    }
}

/// A monotonic counter.
#[derive(Clone, Default)]
pub struct Counter(Sums);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.add(1);
    }

    /// The total.
    pub fn get(&self) -> u64 {
        self.0.total()
    }
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Counter").field(&self.get()).finish()
    }
}

impl TypedMetric for Counter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for Counter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A gauge moved up and down by different threads (each shard holds what its threads
/// added; the value is their sum).
#[derive(Clone, Default)]
pub struct Gauge(Sums);

impl Gauge {
    /// Adds `delta`.
    pub fn add(&self, delta: i64) {
        self.0.add(delta as u64);
    }

    /// The value.
    pub fn get(&self) -> i64 {
        self.0.total() as i64
    }
}

impl std::fmt::Debug for Gauge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Gauge").field(&self.get()).finish()
    }
}

impl TypedMetric for Gauge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for Gauge {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.get())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Buckets of [`Latency`]: upper bounds 50 µs × 2^k for k in `0..BUCKETS` (to about
/// 1.6 s), then +Inf.
const BUCKETS: usize = 16;
const FIRST_BOUND_NANOS: u64 = 50_000;

/// One shard of a [`Latency`] histogram: counts per bucket (the last one +Inf), and the
/// sum in nanoseconds.
#[derive(Default)]
struct LatencyShard {
    buckets: [AtomicU64; BUCKETS + 1],
    sum_nanos: AtomicU64,
}

/// A histogram of durations with the buckets above.
#[derive(Clone, Default)]
pub struct Latency(Arc<[Padded<LatencyShard>; SHARDS]>);

/// The bucket of a duration of `nanos`: the first whose upper bound is at least `nanos`.
fn bucket(nanos: u64) -> usize {
    if nanos <= FIRST_BOUND_NANOS {
        return 0;
    }
    // The smallest k with 50 µs × 2^k ≥ nanos.
    let ratio = nanos.div_ceil(FIRST_BOUND_NANOS);
    let k = (u64::BITS - (ratio - 1).leading_zeros()) as usize;
    k.min(BUCKETS)
}

impl Latency {
    /// Counts one duration.
    pub fn observe(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let s = &self.0[shard()].0;
        s.buckets[bucket(nanos)].fetch_add(1, Ordering::Relaxed);
        s.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The sum in seconds, the count and each bucket's upper bound (seconds) and count.
    fn totals(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut sum = 0u64;
        let mut counts = [0u64; BUCKETS + 1];
        for s in self.0.iter() {
            sum = sum.wrapping_add(s.0.sum_nanos.load(Ordering::Relaxed));
            for (c, b) in counts.iter_mut().zip(&s.0.buckets) {
                *c += b.load(Ordering::Relaxed);
            }
        }
        let buckets = counts
            .iter()
            .enumerate()
            .map(|(k, &c)| {
                let bound = if k == BUCKETS {
                    f64::MAX
                } else {
                    (FIRST_BOUND_NANOS << k) as f64 / 1e9
                };
                (bound, c)
            })
            .collect();
        (sum as f64 / 1e9, counts.iter().sum(), buckets)
    }
}

impl std::fmt::Debug for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (sum, count, _) = self.totals();
        f.debug_struct("Latency")
            .field("sum", &sum)
            .field("count", &count)
            .finish()
    }
}

impl TypedMetric for Latency {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Latency {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.totals();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_falls_in_the_first_bucket_whose_bound_holds_it() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(50_000), 0);
        assert_eq!(bucket(50_001), 1);
        assert_eq!(bucket(100_000), 1);
        assert_eq!(bucket(100_001), 2);
        assert_eq!(bucket(50_000 << 15), 15);
        assert_eq!(bucket((50_000 << 15) + 1), BUCKETS);
        assert_eq!(bucket(u64::MAX), BUCKETS);
    }

    #[test]
    fn shards_of_many_threads_add_up() {
        let (c, g, h) = (Counter::default(), Gauge::default(), Latency::default());
        std::thread::scope(|s| {
            for _ in 0..12 {
                s.spawn(|| {
                    for k in 0..1000u64 {
                        c.inc();
                        g.add(1);
                        g.add(-1);
                        h.observe(Duration::from_micros(k % 200));
                    }
                });
            }
        });
        assert_eq!(c.get(), 12_000);
        assert_eq!(g.get(), 0);
        let (sum, count, buckets) = h.totals();
        assert_eq!(count, 12_000);
        assert_eq!(buckets.iter().map(|b| b.1).sum::<u64>(), 12_000);
        // 0..=50 µs in the first bucket: 51 of every 200.
        assert_eq!(buckets[0], (50e-6, 12 * 5 * 51));
        let expected: u64 = (0..1000u64).map(|k| (k % 200) * 1000).sum::<u64>() * 12;
        assert!((sum - expected as f64 / 1e9).abs() < 1e-9);
    }
}
