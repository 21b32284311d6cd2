//! The lockscript benchmark: figures against the physical floor and a peer, measured
//! in one interleaved run against a private redis-server.
//!
//! ```text
//! cargo run --release -p lockscript-tests --features peers --example bench [-- --quick]
//! ```
//!
//! Every figure comes from the same run: rounds alternate the contenders (A B A B...)
//! and the medians of the rounds are reported, so a noisy neighbour shifts all of them
//! alike. The table goes to stdout; all figures to `target/bench/summary.json`, and the
//! handoff latency distributions (ours against 10 ms polling) to
//! `target/bench/handoff.svg`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_runtime::builtin::compare_del;
use lock_runtime::{Locks, blocking};
use lockscript_tests::server::RedisServer;
use redis::aio::MultiplexedConnection;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How much to measure.
struct Plan {
    rounds: usize,
    cycles: usize,
    throughput_for: Duration,
    handoff_for: Duration,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                rounds: 3,
                cycles: 1_500,
                throughput_for: Duration::from_millis(700),
                handoff_for: Duration::from_millis(1_500),
            }
        } else {
            Self {
                rounds: 7,
                cycles: 5_000,
                throughput_for: Duration::from_secs(2),
                handoff_for: Duration::from_secs(4),
            }
        }
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
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

fn per_op_us(elapsed: Duration, n: usize) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let n = n as f64;
    elapsed.as_secs_f64() * 1e6 / n
}

async fn rtt_p50_us(conn: &mut MultiplexedConnection, n: usize) -> Result<f64, BoxError> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let _: String = redis::cmd("PING").query_async(conn).await?;
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    Ok(percentile(&samples, 0.5))
}

/// The raw floor: `SET NX PX` to take the lock, EVALSHA compare-and-delete to free it.
async fn floor_cycle(conn: &mut MultiplexedConnection, key: &str) -> Result<(), BoxError> {
    let token = "floor-token";
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(conn)
        .await?;
    assert!(set.is_some(), "the floor's key was free");
    let deleted: i64 = redis::cmd("EVALSHA")
        .arg(compare_del("k", "t").script().sha1())
        .arg(1)
        .arg(key)
        .arg(token)
        .query_async(conn)
        .await?;
    assert_eq!(deleted, 1);
    Ok(())
}

async fn floor_cycle_us(conn: &mut MultiplexedConnection, n: usize) -> Result<f64, BoxError> {
    let t = Instant::now();
    for _ in 0..n {
        floor_cycle(conn, "bench:floor").await?;
    }
    Ok(per_op_us(t.elapsed(), n))
}

async fn our_cycle_us(locks: &Locks<MultiplexedConnection>, n: usize) -> Result<f64, BoxError> {
    let t = Instant::now();
    for _ in 0..n {
        let guard = locks
            .try_lock("bench:ours")
            .await?
            .ok_or("our lock was free")?;
        guard.release().await?;
    }
    Ok(per_op_us(t.elapsed(), n))
}

fn blocking_cycle_us(locks: &blocking::Locks, n: usize) -> Result<f64, BoxError> {
    let t = Instant::now();
    for _ in 0..n {
        let guard = locks
            .try_lock("bench:blocking")?
            .ok_or("the lock was free")?;
        guard.release()?;
    }
    Ok(per_op_us(t.elapsed(), n))
}

async fn rslock_cycle_us(rl: &rslock::LockManager, n: usize) -> Result<f64, BoxError> {
    let t = Instant::now();
    for _ in 0..n {
        let lock = rl
            .lock("bench:rslock", Duration::from_secs(30))
            .await
            .map_err(|e| format!("rslock: {e:?}"))?;
        rl.unlock(&lock).await;
    }
    Ok(per_op_us(t.elapsed(), n))
}

/// The CPU seconds the server has used (`INFO cpu`, user + system).
async fn server_cpu_s(conn: &mut MultiplexedConnection) -> Result<f64, BoxError> {
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

/// 64 tasks on distinct keys over one multiplexed connection, for `run_for`. Returns
/// cycles per second and the server's CPU microseconds per cycle.
async fn throughput<F, Fut>(
    stats: &mut MultiplexedConnection,
    run_for: Duration,
    cycle: F,
) -> Result<(f64, f64), BoxError>
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send,
{
    let cpu_before = server_cpu_s(stats).await?;
    let stop = Instant::now() + run_for;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let cycle = cycle.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("bench:tp:{i}");
            let mut n = 0u64;
            while Instant::now() < stop {
                cycle(key.clone()).await?;
                n += 1;
            }
            Ok::<u64, BoxError>(n)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    let cpu = server_cpu_s(stats).await? - cpu_before;
    #[allow(clippy::cast_precision_loss)]
    let total = total as f64;
    Ok((total / run_for.as_secs_f64(), cpu * 1e6 / total))
}

/// What one contender saw of one grant.
#[derive(Clone, Copy)]
struct Grant {
    asked: Instant,
    acquired: Instant,
    releasing: Instant,
    attempts: u32,
}

/// 4 contenders on one lock for `run_for`, each holding it 1 ms and thinking 2 ms
/// between grants; returns the release-to-next-holder times (µs) and the attempts per
/// acquire.
async fn handoff<F, Fut>(run_for: Duration, acquire: F) -> Result<(Vec<f64>, f64), BoxError>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(u32, Release), BoxError>> + Send,
{
    let grants = Arc::new(Mutex::new(Vec::new()));
    let stop = Instant::now() + run_for;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (acquire, grants) = (acquire.clone(), Arc::clone(&grants));
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop {
                let asked = Instant::now();
                let (attempts, release) = acquire().await?;
                let acquired = Instant::now();
                tokio::time::sleep(Duration::from_millis(1)).await; // the protected work
                let releasing = Instant::now();
                release().await?;
                grants.lock().map_err(|_| "poisoned")?.push(Grant {
                    asked,
                    acquired,
                    releasing,
                    attempts,
                });
                // Think before asking again, so the next holder is one of the waiters
                // and not the releaser barging back in.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Ok::<(), BoxError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let mut grants = Arc::try_unwrap(grants)
        .map_err(|_| "contenders still running")?
        .into_inner()
        .map_err(|_| "poisoned")?;
    grants.sort_by_key(|g| g.acquired);
    // A handoff: the next holder was already waiting when this one released.
    let mut samples: Vec<f64> = grants
        .windows(2)
        .filter(|w| w[1].asked < w[0].releasing)
        .map(|w| {
            w[1].acquired
                .saturating_duration_since(w[0].releasing)
                .as_secs_f64()
                * 1e6
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    let attempts: u64 = grants.iter().map(|g| u64::from(g.attempts)).sum();
    #[allow(clippy::cast_precision_loss)]
    let per_acquire = attempts as f64 / grants.len().max(1) as f64;
    Ok((samples, per_acquire))
}

type ReleaseFut = std::pin::Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;
type Release = Box<dyn FnOnce() -> ReleaseFut + Send>;
type AcquireFut = std::pin::Pin<Box<dyn Future<Output = Result<(u32, Release), BoxError>> + Send>>;

/// What a contender hands back for a grant: its attempts, and how to release it.
fn granted<C>(guard: lock_runtime::LockGuard<C>) -> (u32, Release)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let attempts = guard.attempts();
    let release: Release =
        Box::new(move || Box::pin(async move { guard.release().await.map_err(BoxError::from) }));
    (attempts, release)
}

/// Our `lock()` with release notifications.
fn ours_contender(locks: Locks) -> impl Fn() -> AcquireFut + Clone + Send + 'static {
    move || {
        let locks = locks.clone();
        Box::pin(async move { Ok(granted(locks.lock("bench:handoff").await?)) })
    }
}

/// The reference: try every 10 ms until it succeeds.
fn polling_contender(
    locks: Locks<MultiplexedConnection>,
) -> impl Fn() -> AcquireFut + Clone + Send + 'static {
    move || {
        let locks = locks.clone();
        Box::pin(async move {
            let mut attempts = 0;
            loop {
                attempts += 1;
                if let Some(guard) = locks.try_lock("bench:poll").await? {
                    return Ok((attempts, granted(guard).1));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    }
}

/// A CDF of two latency samples on a log axis, as a standalone SVG.
fn cdf_svg(series: &[(&str, &str, &[f64])]) -> String {
    let (width, height, left, bottom, top, right) = (720.0, 360.0, 60.0, 40.0, 30.0, 20.0);
    let all = series.iter().flat_map(|(_, _, s)| s.iter().copied());
    let lo = all
        .clone()
        .fold(f64::INFINITY, f64::min)
        .max(1.0)
        .log10()
        .floor();
    let hi = all.fold(1.0, f64::max).log10().ceil().max(lo + 1.0);
    let x_of = |us: f64| left + (us.max(1.0).log10() - lo) / (hi - lo) * (width - left - right);
    let y_of = |q: f64| top + (1.0 - q) * (height - top - bottom);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"18\" font-size=\"14\">Handoff: release call to next holder (CDF, 4 contenders)</text>\n"
    );
    #[allow(clippy::cast_possible_truncation)]
    for decade in (lo as i32)..=(hi as i32) {
        let us = 10f64.powi(decade);
        let label = if us >= 1000.0 {
            format!("{} ms", us / 1000.0)
        } else {
            format!("{us} µs")
        };
        let _ = writeln!(
            svg,
            "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{2}\" stroke=\"#ddd\"/><text x=\"{0:.1}\" y=\"{3}\" text-anchor=\"middle\">{label}</text>",
            x_of(us),
            top,
            height - bottom,
            height - bottom + 16.0
        );
    }
    for q in [0.0, 0.5, 1.0] {
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"#ddd\"/><text x=\"{2}\" y=\"{3:.1}\" text-anchor=\"end\">{q}</text>",
            y_of(q),
            width - right,
            left - 6.0,
            y_of(q) + 4.0
        );
    }
    for (i, (name, colour, samples)) in series.iter().enumerate() {
        let mut points = String::new();
        #[allow(clippy::cast_precision_loss)]
        let n = samples.len().max(1) as f64;
        for (k, us) in samples.iter().enumerate() {
            #[allow(clippy::cast_precision_loss)]
            let q = (k + 1) as f64 / n;
            let _ = write!(points, "{:.1},{:.1} ", x_of(*us), y_of(q));
        }
        #[allow(clippy::cast_precision_loss)]
        let ly = top + 16.0 + 16.0 * i as f64;
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{points}\"/>\n\
             <rect x=\"{0}\" y=\"{1:.1}\" width=\"12\" height=\"3\" fill=\"{colour}\"/><text x=\"{2}\" y=\"{3:.1}\">{name} (p50 {4:.0} µs)</text>",
            width - 260.0,
            ly - 4.0,
            width - 242.0,
            ly,
            percentile(samples, 0.5)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let quick = std::env::args().any(|a| a == "--quick");
    let plan = Plan::new(quick);
    let server = RedisServer::start();
    let client = server.client();
    let mut conn = client.get_multiplexed_async_connection().await?;
    lock_runtime::load_scripts_async(&mut conn).await?;
    let ours = Locks::new(conn.clone());
    let blocking = blocking::Locks::new(client.get_connection()?);
    let rslock = rslock::LockManager::new(vec![server.url()]);

    let mut samples: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for round in 0..plan.rounds {
        eprint!("\rround {}/{}", round + 1, plan.rounds);
        let n = plan.cycles;
        samples
            .entry("rtt_p50_us")
            .or_default()
            .push(rtt_p50_us(&mut conn, n).await?);
        samples
            .entry("floor_cycle_us")
            .or_default()
            .push(floor_cycle_us(&mut conn, n).await?);
        samples
            .entry("cycle_us")
            .or_default()
            .push(our_cycle_us(&ours, n).await?);
        let b = tokio::task::block_in_place(|| blocking_cycle_us(&blocking, n))?;
        samples.entry("blocking_cycle_us").or_default().push(b);
        samples
            .entry("rslock_cycle_us")
            .or_default()
            .push(rslock_cycle_us(&rslock, n).await?);
        let floor_conn = conn.clone();
        let (rate, cpu) = throughput(&mut conn, plan.throughput_for, move |key| {
            let mut conn = floor_conn.clone();
            async move { floor_cycle(&mut conn, &key).await }
        })
        .await?;
        samples
            .entry("floor_throughput_cycles_per_s")
            .or_default()
            .push(rate);
        samples
            .entry("floor_server_cpu_us_per_cycle")
            .or_default()
            .push(cpu);
        let tp_locks = ours.clone();
        let (rate, cpu) = throughput(&mut conn, plan.throughput_for, move |key| {
            let locks = tp_locks.clone();
            async move {
                let guard = locks.try_lock(&key).await?.ok_or("free")?;
                guard.release().await?;
                Ok(())
            }
        })
        .await?;
        samples
            .entry("throughput_cycles_per_s")
            .or_default()
            .push(rate);
        samples
            .entry("server_cpu_us_per_cycle")
            .or_default()
            .push(cpu);
    }
    eprintln!();

    let notified = Locks::connect(&client)
        .await?
        .wait_timeout(Duration::from_secs(30));
    let (ours_handoff, attempts) = handoff(plan.handoff_for, ours_contender(notified)).await?;
    let (poll_handoff, _) = handoff(plan.handoff_for, polling_contender(ours.clone())).await?;

    let mut figures: BTreeMap<&str, f64> =
        samples.into_iter().map(|(k, v)| (k, median(v))).collect();
    figures.insert("handoff_p50_us", percentile(&ours_handoff, 0.5));
    figures.insert("handoff_p99_us", percentile(&ours_handoff, 0.99));
    figures.insert("attempts_per_acquire", attempts);
    figures.insert("poll_handoff_p50_us", percentile(&poll_handoff, 0.5));

    report(&figures, quick, ours_handoff.len(), poll_handoff.len());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&dir)?;
    let json = serde_json::to_string_pretty(&figures)?;
    std::fs::write(dir.join("summary.json"), json + "\n")?;
    std::fs::write(
        dir.join("handoff.svg"),
        cdf_svg(&[
            ("lockscript lock() (notified)", "#1f77b4", &ours_handoff),
            ("10 ms polling", "#d62728", &poll_handoff),
        ]),
    )?;
    println!(
        "\nwrote {} and handoff.svg",
        dir.join("summary.json").display()
    );
    drop(server);
    Ok(())
}

fn report(figures: &BTreeMap<&str, f64>, quick: bool, handoffs: usize, polls: usize) {
    let get = |k: &str| figures.get(k).copied().unwrap_or(f64::NAN);
    println!(
        "lockscript bench ({}; {} cores; redis-server on loopback)\n",
        if quick { "--quick" } else { "full" },
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );
    println!("{:<32} {:>12}", "figure", "value");
    for (k, v) in figures {
        println!("{k:<32} {v:>12.1}");
    }
    println!(
        "\n(handoff samples: {handoffs} notified, {polls} polling)\n\ntargets (ratios within this run):"
    );
    let checks = [
        (
            "cycle_us <= 1.10 x floor_cycle_us",
            get("cycle_us") / get("floor_cycle_us"),
            1.10,
            true,
        ),
        (
            "rslock_cycle_us >= 1.2 x cycle_us",
            get("rslock_cycle_us") / get("cycle_us"),
            1.2,
            false,
        ),
        (
            "throughput >= 0.9 x floor's",
            get("throughput_cycles_per_s") / get("floor_throughput_cycles_per_s"),
            0.9,
            false,
        ),
        (
            "handoff_p50_us <= 3 x rtt_p50_us",
            get("handoff_p50_us") / get("rtt_p50_us"),
            3.0,
            true,
        ),
        (
            "attempts_per_acquire <= 2",
            get("attempts_per_acquire"),
            2.0,
            true,
        ),
    ];
    for (what, ratio, bound, at_most) in checks {
        let ok = if at_most {
            ratio <= bound
        } else {
            ratio >= bound
        };
        println!(
            "  {what:<40} {ratio:>6.2}  {}",
            if ok { "holds" } else { "MISSED" }
        );
    }
}
