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
//! handoff latency distributions (ours against 10 ms polling and the raw pub/sub floor)
//! to `target/bench/handoff.svg`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use lock_runtime::builtin::{acquire, compare_del};
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

/// The median `PING` round trip over `n` pings, each sent `idle` after the last reply
/// (zero: back to back). After an idle millisecond the machine has to wake up (on this VM
/// that costs more than the round trip itself), which is what a handoff after 1 ms of
/// held work pays.
async fn rtt_p50_us(
    conn: &mut MultiplexedConnection,
    n: usize,
    idle: Duration,
) -> Result<f64, BoxError> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        if !idle.is_zero() {
            tokio::time::sleep(idle).await;
        }
        let t = Instant::now();
        let _: String = redis::cmd("PING").query_async(conn).await?;
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    Ok(percentile(&samples, 0.5))
}

/// The scripts' digests, read once: the floor's loop must not pay for building an
/// `Invocation` per cycle just to learn them.
static ACQUIRE_SHA: LazyLock<&str> = LazyLock::new(|| acquire("k", "f", "t", 1).script().sha1());
static COMPARE_DEL_SHA: LazyLock<&str> = LazyLock::new(|| compare_del("k", "t").script().sha1());

/// How a raw floor cycle takes its lock.
#[derive(Clone, Copy)]
enum Take {
    /// `SET NX PX`: the physical floor the issue names.
    Set,
    /// EVALSHA of acquire-with-retry.lua, the script ours runs (`SET NX PX` and the
    /// fencing `INCR` in one atomic call): the same server work as ours, without our
    /// client, to show what the script itself costs.
    Script,
}

/// A raw cycle with the plain redis crate: take the lock as `take` says, then EVALSHA
/// compare-and-delete to free it.
async fn floor_cycle(
    conn: &mut MultiplexedConnection,
    key: &str,
    take: Take,
) -> Result<(), BoxError> {
    let token = "floor-token";
    let got_it = match take {
        Take::Set => {
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query_async(conn)
                .await?;
            set.is_some()
        }
        Take::Script => {
            let (acquired, _fence): (i64, i64) = redis::cmd("EVALSHA")
                .arg(*ACQUIRE_SHA)
                .arg(2)
                .arg(key)
                .arg(format!("{key}:fence"))
                .arg(token)
                .arg(30_000)
                .query_async(conn)
                .await?;
            acquired == 1
        }
    };
    assert!(got_it, "the floor's key was free");
    let deleted: i64 = redis::cmd("EVALSHA")
        .arg(*COMPARE_DEL_SHA)
        .arg(1)
        .arg(key)
        .arg(token)
        .query_async(conn)
        .await?;
    assert_eq!(deleted, 1);
    Ok(())
}

async fn floor_cycle_us(
    conn: &mut MultiplexedConnection,
    n: usize,
    take: Take,
) -> Result<f64, BoxError> {
    let t = Instant::now();
    for _ in 0..n {
        floor_cycle(conn, "bench:floor", take).await?;
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

/// Clock ticks per second of `/proc/self/stat`'s times (`getconf CLK_TCK`, 100 on Linux).
const CLOCK_TICKS_PER_S: f64 = 100.0;

/// The CPU seconds this process has used (user + system): `utime` and `stime`, fields
/// 14 and 15 of `/proc/self/stat`, in clock ticks (so 10 ms resolution).
fn client_cpu_s() -> Result<f64, BoxError> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Field 2 is `(comm)`, which may hold spaces and parentheses: count from the last ')'.
    let (_, rest) = stat.rsplit_once(')').ok_or("/proc/self/stat: no ')'")?;
    // `rest` starts at field 3 (state), so fields 14 and 15 are its 12th and 13th words.
    let mut fields = rest.split_whitespace().skip(11);
    let mut ticks = 0u64;
    for name in ["utime", "stime"] {
        ticks += fields
            .next()
            .ok_or_else(|| format!("/proc/self/stat: no {name}"))?
            .parse::<u64>()?;
    }
    #[allow(clippy::cast_precision_loss)]
    let ticks = ticks as f64;
    Ok(ticks / CLOCK_TICKS_PER_S)
}

/// What one throughput window measured.
struct Throughput {
    /// Cycles per second.
    rate: f64,
    /// The server's CPU microseconds per cycle.
    server_cpu_us: f64,
    /// This process's (the client's) CPU microseconds per cycle.
    client_cpu_us: f64,
    /// Client + server CPU seconds over wall seconds: the cores kept busy.
    cores_busy: f64,
}

/// 64 tasks on distinct keys over one multiplexed connection, for `run_for`. Returns
/// cycles per second, the server's and this process's CPU microseconds per cycle, and
/// the cores both kept busy.
async fn throughput<F, Fut>(
    stats: &mut MultiplexedConnection,
    run_for: Duration,
    cycle: F,
) -> Result<Throughput, BoxError>
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send,
{
    let cpu_before = server_cpu_s(stats).await?;
    let client_before = client_cpu_s()?;
    let started = Instant::now();
    let stop = started + run_for;
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
    let wall = started.elapsed().as_secs_f64();
    let client = client_cpu_s()? - client_before;
    let cpu = server_cpu_s(stats).await? - cpu_before;
    #[allow(clippy::cast_precision_loss)]
    let total = total as f64;
    Ok(Throughput {
        rate: total / run_for.as_secs_f64(),
        server_cpu_us: cpu * 1e6 / total,
        client_cpu_us: client * 1e6 / total,
        cores_busy: (client + cpu) / wall,
    })
}

/// One round of the throughput sections, the floor's and then ours, each for `run_for`;
/// pushes their figures onto `samples`.
async fn throughput_round(
    conn: &mut MultiplexedConnection,
    ours: &Locks<MultiplexedConnection>,
    run_for: Duration,
    samples: &mut BTreeMap<&'static str, Vec<f64>>,
) -> Result<(), BoxError> {
    let floor_conn = conn.clone();
    let tp = throughput(conn, run_for, move |key| {
        let mut conn = floor_conn.clone();
        async move { floor_cycle(&mut conn, &key, Take::Set).await }
    })
    .await?;
    for (figure, value) in [
        ("floor_throughput_cycles_per_s", tp.rate),
        ("floor_server_cpu_us_per_cycle", tp.server_cpu_us),
        ("floor_client_cpu_us_per_cycle", tp.client_cpu_us),
        ("floor_cores_busy", tp.cores_busy),
    ] {
        samples.entry(figure).or_default().push(value);
    }
    let floor_conn = conn.clone();
    let tp = throughput(conn, run_for, move |key| {
        let mut conn = floor_conn.clone();
        async move { floor_cycle(&mut conn, &key, Take::Script).await }
    })
    .await?;
    for (figure, value) in [
        ("floor_script_throughput_cycles_per_s", tp.rate),
        ("floor_script_server_cpu_us_per_cycle", tp.server_cpu_us),
    ] {
        samples.entry(figure).or_default().push(value);
    }
    let tp_locks = ours.clone();
    let tp = throughput(conn, run_for, move |key| {
        let locks = tp_locks.clone();
        async move {
            let guard = locks.try_lock(&key).await?.ok_or("free")?;
            guard.release().await?;
            Ok(())
        }
    })
    .await?;
    for (figure, value) in [
        ("throughput_cycles_per_s", tp.rate),
        ("server_cpu_us_per_cycle", tp.server_cpu_us),
        ("client_cpu_us_per_cycle", tp.client_cpu_us),
        ("cores_busy", tp.cores_busy),
    ] {
        samples.entry(figure).or_default().push(value);
    }
    Ok(())
}

/// Contenders in each handoff measurement.
const CONTENDERS: usize = 4;

/// What one contender saw of one grant.
#[derive(Clone, Copy)]
struct Grant {
    asked: Instant,
    acquired: Instant,
    releasing: Instant,
    attempts: u32,
}

/// One contender per element of `contenders` (4 in every use) on one lock for
/// `run_for`, each holding it 1 ms and thinking 2 ms between grants; returns the
/// release-to-next-holder times (µs) and the attempts per acquire.
async fn handoff<F, Fut>(run_for: Duration, contenders: Vec<F>) -> Result<(Vec<f64>, f64), BoxError>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(u32, Release), BoxError>> + Send,
{
    let grants = Arc::new(Mutex::new(Vec::new()));
    let stop = Instant::now() + run_for;
    let mut tasks = Vec::new();
    for acquire in contenders {
        let grants = Arc::clone(&grants);
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

/// The raw notified handoff floor, with the plain redis crate: a releaser R and a waiter
/// W on one key, one handoff at a time, for `run_for`. R takes the key (`SET NX PX`),
/// works 1 ms, then releases it with compare-del, which publishes on the key's release
/// channel; W, subscribed on its own connection, takes the key at the message, and frees
/// it with a plain `DEL` (no message) before R's next round. Returns the times (µs) from
/// R's release call to W holding the key.
///
/// W listens with RESP3 push messages on a dedicated subscribed connection: the redis
/// crate hands those to a `tokio` unbounded channel from the connection's driver task,
/// as its `aio::PubSub` does, and reading them needs no `Stream` trait (this crate has no
/// `futures` dependency).
async fn floor_handoff(server_url: &str, run_for: Duration) -> Result<Vec<f64>, BoxError> {
    const KEY: &str = "bench:floorhand";
    let channel = format!("{KEY}:released");
    let client = redis::Client::open(server_url)?;
    let resp3 = redis::Client::open(format!("{server_url}?protocol=resp3"))?;
    let (push_tx, mut pushes) = tokio::sync::mpsc::unbounded_channel();
    let config = redis::AsyncConnectionConfig::new().set_push_sender(push_tx);
    let mut sub = resp3
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    sub.subscribe(&channel).await?;
    let mut waiter_conn = client.get_multiplexed_async_connection().await?;
    let mut releaser_conn = client.get_multiplexed_async_connection().await?;
    let (t0_tx, mut t0_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let (go_tx, mut go_rx) = tokio::sync::mpsc::unbounded_channel::<()>();

    let waiter = tokio::spawn(async move {
        let _subscribed = sub; // the subscription lives as long as W
        let mut samples = Vec::new();
        go_tx.send(()).map_err(|_| "releaser gone")?; // subscribed: R may begin
        loop {
            let push = pushes.recv().await.ok_or("subscription closed")?;
            if !matches!(push.kind, redis::PushKind::Message) {
                continue; // e.g. the subscribe confirmation
            }
            // R sends t0 before it releases, so it is already here; none left means R
            // has finished (its last message only wakes W up).
            let Some(t0) = t0_rx.recv().await else {
                break;
            };
            let set: Option<String> = redis::cmd("SET")
                .arg(KEY)
                .arg("floor-w")
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query_async(&mut waiter_conn)
                .await?;
            let t1 = Instant::now();
            set.ok_or("the floor waiter's SET NX failed after the release message")?;
            samples.push(t1.saturating_duration_since(t0).as_secs_f64() * 1e6);
            let _: i64 = redis::cmd("DEL")
                .arg(KEY)
                .query_async(&mut waiter_conn)
                .await?;
            if go_tx.send(()).is_err() {
                break;
            }
        }
        Ok::<Vec<f64>, BoxError>(samples)
    });

    let release = compare_del(KEY, "floor-r");
    let stop = Instant::now() + run_for;
    loop {
        go_rx.recv().await.ok_or("the floor waiter stopped")?;
        if Instant::now() >= stop {
            break;
        }
        let set: Option<String> = redis::cmd("SET")
            .arg(KEY)
            .arg("floor-r")
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut releaser_conn)
            .await?;
        set.ok_or("the floor's key was free")?;
        tokio::time::sleep(Duration::from_millis(1)).await; // the protected work
        let t0 = Instant::now();
        t0_tx.send(t0).map_err(|_| "the floor waiter stopped")?;
        if release.invoke_async(&mut releaser_conn).await? != 1 {
            return Err("the floor releaser's compare-del found another token".into());
        }
    }
    drop(t0_tx);
    let _: i64 = redis::cmd("PUBLISH")
        .arg(&channel)
        .arg("stop")
        .query_async(&mut releaser_conn)
        .await?;
    let mut samples = waiter.await??;
    samples.sort_by(f64::total_cmp);
    Ok(samples)
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

/// A CDF of latency samples on a log axis, as a standalone SVG.
fn cdf_svg(series: &[(&str, &str, &[f64])]) -> String {
    let (width, height, left, bottom, top, right) = (720.0, 360.0, 60.0, 40.0, 30.0, 20.0);
    // The legend goes under the plot, one row per series, clear of the curves.
    #[allow(clippy::cast_precision_loss)]
    let total_height = height + 16.0 * series.len() as f64 + 8.0;
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
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{total_height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"18\" font-size=\"14\">Handoff: release call to next holder (CDF; 4 contenders, the raw floor 1 waiter)</text>\n"
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
        let ly = height + 6.0 + 16.0 * i as f64;
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{points}\"/>\n\
             <rect x=\"{0}\" y=\"{1:.1}\" width=\"12\" height=\"3\" fill=\"{colour}\"/><text x=\"{2}\" y=\"{3:.1}\">{name} (p50 {4:.0} µs)</text>",
            left,
            ly - 4.0,
            left + 18.0,
            ly,
            percentile(samples, 0.5)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The handoff latencies (µs, sorted) of each way to wait for a lock, and attempts per
/// acquire where they mean something.
struct Handoffs {
    /// Ours, the 4 contenders sharing one handle (tasks of one service): releases hand
    /// the lock over.
    shared: Vec<f64>,
    shared_attempts: f64,
    /// Ours, one handle each (as in 4 processes): every release publishes and the
    /// woken waiters attempt.
    separate: Vec<f64>,
    separate_attempts: f64,
    /// The raw pub/sub floor: one waiter, plain redis crate.
    floor: Vec<f64>,
    /// Ours with `try_lock` every 10 ms.
    polling: Vec<f64>,
}

impl Handoffs {
    async fn measure(
        client: &redis::Client,
        url: &str,
        ours: &Locks<MultiplexedConnection>,
        run_for: Duration,
    ) -> Result<Self, BoxError> {
        let notified = Locks::connect(client)
            .await?
            .wait_timeout(Duration::from_secs(30));
        let shared = vec![ours_contender(notified); CONTENDERS];
        let (shared, shared_attempts) = handoff(run_for, shared).await?;
        let mut separate = Vec::new();
        for _ in 0..CONTENDERS {
            let locks = Locks::connect(client)
                .await?
                .wait_timeout(Duration::from_secs(30));
            separate.push(ours_contender(locks));
        }
        let (separate, separate_attempts) = handoff(run_for, separate).await?;
        let floor = floor_handoff(url, run_for).await?;
        let polling = vec![polling_contender(ours.clone()); CONTENDERS];
        let (polling, _) = handoff(run_for, polling).await?;
        Ok(Self {
            shared,
            shared_attempts,
            separate,
            separate_attempts,
            floor,
            polling,
        })
    }

    fn figures(&self, figures: &mut BTreeMap<&str, f64>) {
        figures.insert("handoff_p50_us", percentile(&self.shared, 0.5));
        figures.insert("handoff_p99_us", percentile(&self.shared, 0.99));
        figures.insert("attempts_per_acquire", self.shared_attempts);
        figures.insert("handoff_separate_p50_us", percentile(&self.separate, 0.5));
        figures.insert("handoff_separate_p99_us", percentile(&self.separate, 0.99));
        figures.insert("attempts_per_acquire_separate", self.separate_attempts);
        figures.insert("floor_handoff_p50_us", percentile(&self.floor, 0.5));
        figures.insert("floor_handoff_p99_us", percentile(&self.floor, 0.99));
        figures.insert("poll_handoff_p50_us", percentile(&self.polling, 0.5));
    }
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
            .push(rtt_p50_us(&mut conn, n, Duration::ZERO).await?);
        let idle = Duration::from_millis(1);
        samples
            .entry("rtt_after_idle_p50_us")
            .or_default()
            .push(rtt_p50_us(&mut conn, n / 10, idle).await?);
        samples
            .entry("floor_cycle_us")
            .or_default()
            .push(floor_cycle_us(&mut conn, n, Take::Set).await?);
        samples
            .entry("floor_script_cycle_us")
            .or_default()
            .push(floor_cycle_us(&mut conn, n, Take::Script).await?);
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
        throughput_round(&mut conn, &ours, plan.throughput_for, &mut samples).await?;
    }
    eprintln!();

    let handoffs = Handoffs::measure(&client, &server.url(), &ours, plan.handoff_for).await?;
    let mut figures: BTreeMap<&str, f64> =
        samples.into_iter().map(|(k, v)| (k, median(v))).collect();
    handoffs.figures(&mut figures);
    // Were the machine CPU bound, the best throughput ratio ours could reach with a
    // client as cheap as the floor's: the floor's CPU per cycle over ours with its client.
    let fig = |k: &str| figures.get(k).copied().unwrap_or(f64::NAN);
    let floor_client = fig("floor_client_cpu_us_per_cycle");
    let cpu_bound_ratio = (floor_client + fig("floor_server_cpu_us_per_cycle"))
        / (floor_client + fig("server_cpu_us_per_cycle"));
    figures.insert("throughput_cpu_bound_ratio", cpu_bound_ratio);

    report(
        &figures,
        quick,
        [
            handoffs.shared.len(),
            handoffs.separate.len(),
            handoffs.floor.len(),
            handoffs.polling.len(),
        ],
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&dir)?;
    let json = serde_json::to_string_pretty(&figures)?;
    std::fs::write(dir.join("summary.json"), json + "\n")?;
    std::fs::write(
        dir.join("handoff.svg"),
        cdf_svg(&[
            (
                "lockscript, one handle (handover)",
                "#1f77b4",
                &handoffs.shared,
            ),
            (
                "lockscript, a handle each (notified)",
                "#9467bd",
                &handoffs.separate,
            ),
            ("raw pub/sub floor", "#2ca02c", &handoffs.floor),
            ("10 ms polling", "#d62728", &handoffs.polling),
        ]),
    )?;
    println!(
        "\nwrote {} and handoff.svg",
        dir.join("summary.json").display()
    );
    drop(server);
    Ok(())
}

/// Prints the figures and the targets; `samples` counts the handoffs measured: one
/// handle, a handle each, raw floor, polling.
fn report(figures: &BTreeMap<&str, f64>, quick: bool, samples: [usize; 4]) {
    let [handoffs, separate, floors, polls] = samples;
    let get = |k: &str| figures.get(k).copied().unwrap_or(f64::NAN);
    println!(
        "lockscript bench ({}; {} cores; redis-server on loopback)\n",
        if quick { "--quick" } else { "full" },
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );
    println!("{:<32} {:>12}", "figure", "value");
    for (k, v) in figures {
        // Ratios and core counts are small: show them to two places.
        let places = if v.abs() < 10.0 { 2 } else { 1 };
        println!("{k:<32} {v:>12.places$}");
    }
    println!(
        "\n(handoff samples: {handoffs} one handle, {separate} a handle each, {floors} raw floor, {polls} polling)\n\ntargets (ratios within this run):"
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
    // Ratios that explain the targets: numerator, denominator.
    let info = [
        ("cycle_us", "floor_script_cycle_us"),
        ("floor_script_cycle_us", "floor_cycle_us"),
        (
            "throughput_cycles_per_s",
            "floor_script_throughput_cycles_per_s",
        ),
        (
            "floor_script_throughput_cycles_per_s",
            "floor_throughput_cycles_per_s",
        ),
        ("handoff_p50_us", "floor_handoff_p50_us"),
        ("handoff_p50_us", "rtt_after_idle_p50_us"),
        ("handoff_separate_p50_us", "floor_handoff_p50_us"),
        ("handoff_separate_p50_us", "rtt_p50_us"),
    ];
    println!("\nexplaining ratios:");
    for (num, den) in info {
        println!("  {num} / {den}: {:.2}", get(num) / get(den));
    }
}
