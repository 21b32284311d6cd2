//! The bench's arithmetic and clocks: samples per figure and their medians, percentiles,
//! and the CPU time of this process (the client) and of the server.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::BoxError;

/// Each figure's samples, one per round.
#[derive(Default)]
pub struct Samples(BTreeMap<String, Vec<f64>>);

impl Samples {
    pub fn push(&mut self, figure: impl Into<String>, value: f64) {
        self.0.entry(figure.into()).or_default().push(value);
    }

    /// `num / den` in each round (measured interleaved, so a round's noise falls on both):
    /// their median, lowest and highest. The median of these paired ratios is what a
    /// target on `num / den` checks; a ratio of the two figures' medians may pair one
    /// round's slow seconds with another's fast ones.
    pub fn round_ratios(&self, num: &str, den: &str) -> Option<RoundRatios> {
        let ratios: Vec<f64> = self
            .0
            .get(num)?
            .iter()
            .zip(self.0.get(den)?)
            .map(|(n, d)| n / d)
            .collect();
        Some(RoundRatios {
            lo: ratios.iter().copied().reduce(f64::min)?,
            hi: ratios.iter().copied().reduce(f64::max)?,
            median: median(ratios),
        })
    }

    /// Each figure's median over the rounds.
    pub fn medians(self) -> BTreeMap<String, f64> {
        self.0.into_iter().map(|(k, v)| (k, median(v))).collect()
    }
}

/// A ratio of two figures, round by round.
#[derive(Clone, Copy)]
pub struct RoundRatios {
    pub median: f64,
    pub lo: f64,
    pub hi: f64,
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

pub fn per_op_us(elapsed: Duration, n: usize) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let n = n as f64;
    elapsed.as_secs_f64() * 1e6 / n
}

/// What `n` back-to-back cycles cost, per cycle.
pub struct PerCycle {
    /// Wall-clock microseconds.
    pub wall_us: f64,
    /// Microseconds of CPU that this process's threads ran, all of them: the caller's,
    /// a runtime's workers and I/O driver, the faces' watchdogs.
    pub client_cpu_us: f64,
}

impl PerCycle {
    /// Runs `cycles` (which does `n` cycles) and measures it.
    pub fn measure(
        n: usize,
        cycles: impl FnOnce() -> Result<(), BoxError>,
    ) -> Result<Self, BoxError> {
        let cpu_before = threads_cpu_ns()?;
        let started = Instant::now();
        cycles()?;
        let wall = started.elapsed();
        let cpu = Duration::from_nanos(threads_cpu_ns()?.saturating_sub(cpu_before));
        Ok(Self {
            wall_us: per_op_us(wall, n),
            client_cpu_us: per_op_us(cpu, n),
        })
    }

    /// Pushes `<stem>_cycle_us` and `<stem>_cycle_client_cpu_us`.
    pub fn push(&self, samples: &mut Samples, stem: &str) {
        samples.push(format!("{stem}_cycle_us"), self.wall_us);
        samples.push(format!("{stem}_cycle_client_cpu_us"), self.client_cpu_us);
    }
}

/// Contenders measured in interleaved blocks: a round's `n` cycles per contender are cut
/// into [`BLOCKS`] blocks, and in each block every contender runs its share, in an order
/// shuffled from block to block. A slow second of the machine then falls on a face and
/// its floor alike: measured whole one after the other, they were seconds apart, and on
/// this VM the ratio of one round to the next moved from 0.58 to 1.92. Shuffled, not
/// rotated: rotation keeps each contender behind the same one in every block, and
/// whichever face ran first after the sync floors paid about 10 µs a cycle more
/// (2026-11-27: the sync face read 1.10 to 1.12 x its floor behind the `FCALL` floor;
/// moved behind its own twin with a recorder, 1.01, and the twin 1.10).
pub struct Interleaved<'a> {
    contenders: Vec<Contender<'a>>,
}

/// How many blocks a round is cut into.
pub const BLOCKS: usize = 25;

/// Runs `n` cycles of one contender.
pub type Cycles<'a> = Box<dyn FnMut(usize) -> Result<(), BoxError> + 'a>;

struct Contender<'a> {
    stem: String,
    cycles: Cycles<'a>,
    wall: Duration,
    cpu_ns: u64,
}

impl<'a> Interleaved<'a> {
    pub fn new() -> Self {
        Self {
            contenders: Vec::new(),
        }
    }

    /// Adds a contender whose figures are `<stem>_cycle_us` and
    /// `<stem>_cycle_client_cpu_us`.
    pub fn add(&mut self, stem: impl Into<String>, cycles: Cycles<'a>) {
        self.contenders.push(Contender {
            stem: stem.into(),
            cycles,
            wall: Duration::ZERO,
            cpu_ns: 0,
        });
    }

    /// Runs `n` cycles of every contender, interleaved, and pushes their figures.
    pub fn round(mut self, n: usize, samples: &mut Samples) -> Result<(), BoxError> {
        let share = n.div_ceil(BLOCKS);
        let count = self.contenders.len();
        let mut order: Vec<usize> = (0..count).collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..BLOCKS {
            shuffle(&mut order, &mut seed);
            for &i in &order {
                let c = &mut self.contenders[i];
                let cpu_before = threads_cpu_ns()?;
                let started = Instant::now();
                (c.cycles)(share)?;
                c.wall += started.elapsed();
                c.cpu_ns += threads_cpu_ns()?.saturating_sub(cpu_before);
            }
        }
        for c in self.contenders {
            let total = share * BLOCKS;
            let per_cycle = PerCycle {
                wall_us: per_op_us(c.wall, total),
                client_cpu_us: per_op_us(Duration::from_nanos(c.cpu_ns), total),
            };
            per_cycle.push(samples, &c.stem);
        }
        Ok(())
    }
}

/// Puts `order` in a fresh order drawn from `seed` (xorshift64, Fisher-Yates): the
/// bench's own fixed sequence, the same in every run.
fn shuffle(order: &mut [usize], seed: &mut u64) {
    for i in (1..order.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        let j = usize::try_from(*seed % (i as u64 + 1)).unwrap_or(0);
        order.swap(i, j);
    }
}

/// The nanoseconds of CPU this process's live threads have run: the first field of each
/// `/proc/self/task/<tid>/schedstat` (the scheduler's own accounting, to the
/// nanosecond, where `/proc/self/stat` counts 10 ms ticks). A thread that ends takes its
/// time with it; none ends while a cycle is measured (runtimes and watchdogs live for the
/// whole run).
pub fn threads_cpu_ns() -> Result<u64, BoxError> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task")? {
        let Ok(stat) = std::fs::read_to_string(task?.path().join("schedstat")) else {
            continue; // the thread ended between the listing and the read
        };
        total += stat
            .split_whitespace()
            .next()
            .ok_or("/proc/self/task/*/schedstat: empty")?
            .parse::<u64>()?;
    }
    Ok(total)
}

/// The CPU seconds the server has used (`INFO cpu`, user + system).
pub async fn server_cpu_s(conn: &mut MultiplexedConnection) -> Result<f64, BoxError> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    Ok(info
        .lines()
        .filter_map(|l| {
            l.strip_prefix("used_cpu_sys:")
                .or_else(|| l.strip_prefix("used_cpu_user:"))
        })
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum())
}
