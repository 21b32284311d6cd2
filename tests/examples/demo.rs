//! The lockscript demo: the scripts the binary carries, then workers contending for a
//! few locks, with live progress and a summary that checks what a lock must guarantee;
//! then what a holder sees when it loses its lock, and how fencing stops a holder that
//! was paused past its lease from writing: to PostgreSQL, and to Redis through a guarded
//! script.
//!
//! Run it with `./run demo`. It starts a private redis-server unless `REDIS_URL` is
//! set, and a private PostgreSQL when one is installed; `DEMO_SECONDS` sets how long the
//! workers run (default 5).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockscript::sql::FencedUpsert;
use lockscript::{LockError, Locks, lock_script};
use lockscript_test::history::assert_exclusive;
use lockscript_test::postgres::PostgresServer;
use lockscript_test::server::RedisServer;

/// Adds `by` to the counter at `counter`, only while `guard` holds its lock.
#[lock_script("lua/bump.lua", guarded)]
fn bump(#[key] counter: &str, by: i64) -> i64;

const LOCKS: [&str; 3] = ["orders", "billing", "reports"];
const WORKERS: usize = 8;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One grant as a worker saw it.
#[derive(Clone, Copy)]
struct Grant {
    lock: usize,
    fence: u64,
    acquired: Instant,
    releasing: Instant,
    waited: Duration,
    attempts: u32,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let (_server, url) = if let Ok(url) = std::env::var("REDIS_URL") {
        (None, url)
    } else {
        let server = RedisServer::start();
        let url = server.url();
        (Some(server), url)
    };
    // lockscript's `metrics` feature, recorded as a Prometheus server would scrape them
    // (an app serves `metrics.render()` on its /metrics endpoint).
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    lockscript::metrics::describe();
    let seconds: u64 = std::env::var("DEMO_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    println!("lockscript demo against {url}\n");

    println!("Scripts in this binary (check them with `cd scripts && sha1sum -c SHA1SUMS`):");
    for s in lockscript::scripts().filter(|s| s.path().starts_with("scripts/")) {
        println!(
            "  {}  {:<20} KEYS {} ARGV {}",
            s.sha1(),
            s.name(),
            s.keys(),
            s.args()
        );
    }

    let client = redis::Client::open(url.as_str())?;
    let locks = Locks::connect(&client)
        .await?
        .ttl(Duration::from_secs(5))
        .wait_timeout(Duration::from_secs(10));
    let mut plain = client.get_multiplexed_async_connection().await?;
    for name in LOCKS {
        let _: () = redis::cmd("DEL")
            .arg(format!("lock:{{{name}}}"))
            .arg(format!("lock:{{{name}}}:fence"))
            .query_async(&mut plain)
            .await?;
    }

    println!(
        "\n{WORKERS} workers contend for {} locks for {seconds} s (each holds ~1 ms):",
        LOCKS.len()
    );
    let grants = contend(&locks, Duration::from_secs(seconds)).await?;
    summarize(&grants);
    show_failures(&locks, &mut plain).await?;
    show_fencing(&locks, &mut plain).await?;
    show_metrics(&metrics.render());
    Ok(())
}

/// The lock engine's figures as Prometheus text: counters, and each histogram's count
/// and median and p99 (the exporter renders histograms as summaries).
fn show_metrics(text: &str) {
    println!(
        "\nMetrics (the `metrics` feature; Prometheus text, {} lines in all):",
        text.lines().count()
    );
    for line in text.lines().filter(|l| l.starts_with("lockscript_")) {
        let shown = line.contains("_total")
            || line.contains("_count")
            || line.contains("quantile=\"0.5\"")
            || line.contains("quantile=\"0.99\"");
        if shown {
            println!("  {line}");
        }
    }
}

/// Runs the workers with a live progress line and returns every grant they saw.
async fn contend(locks: &Locks, run_for: Duration) -> Result<Vec<Grant>, BoxError> {
    let grants = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicU64::new(0));
    let stop_at = Instant::now() + run_for;
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let (locks, grants, done) = (locks.clone(), Arc::clone(&grants), Arc::clone(&done));
        workers.push(tokio::spawn(async move {
            let mut n = worker;
            while Instant::now() < stop_at {
                n = n.wrapping_mul(31).wrapping_add(7);
                let lock = n % LOCKS.len();
                let guard = locks.lock(LOCKS[lock]).await?;
                let acquired = Instant::now();
                tokio::time::sleep(Duration::from_millis(1)).await; // the protected work
                let grant = Grant {
                    lock,
                    fence: guard.fencing_token(),
                    acquired,
                    releasing: Instant::now(),
                    waited: guard.waited(),
                    attempts: guard.attempts(),
                };
                guard.release().await?;
                grants.lock().map_err(|_| "poisoned")?.push(grant);
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), BoxError>(())
        }));
    }
    let started = Instant::now();
    while Instant::now() < stop_at {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let n = done.load(Ordering::Relaxed);
        #[allow(clippy::cast_precision_loss)]
        let rate = n as f64 / started.elapsed().as_secs_f64();
        print!(
            "\r  {:>4.1} s  {n:>6} acquisitions  {rate:>6.0}/s",
            started.elapsed().as_secs_f64()
        );
        std::io::stdout().flush()?;
    }
    for w in workers {
        w.await??;
    }
    println!();
    let grants = Arc::try_unwrap(grants).map_err(|_| "workers still running")?;
    Ok(grants.into_inner().map_err(|_| "poisoned")?)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    lockscript_test::history::percentile(sorted, p).unwrap_or_default()
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// Checks the history (it panics on any overlap or falling fence) and prints figures.
fn summarize(grants: &[Grant]) {
    let mut waits: Vec<Duration> = grants.iter().map(|g| g.waited).collect();
    waits.sort_unstable();
    let attempts: u64 = grants.iter().map(|g| u64::from(g.attempts)).sum();
    let mut handoffs = Vec::new();
    for lock in 0..LOCKS.len() {
        let mut mine: Vec<Grant> = grants.iter().copied().filter(|g| g.lock == lock).collect();
        mine.sort_by_key(|g| g.acquired);
        let mut history: Vec<(u64, Instant, Instant)> = mine
            .iter()
            .map(|g| (g.fence, g.acquired, g.releasing))
            .collect();
        assert_exclusive(&mut history);
        for pair in mine.windows(2) {
            // A handoff: the next holder was already waiting when this one released.
            let asked = pair[1].acquired.checked_sub(pair[1].waited);
            if asked.is_some_and(|asked| asked < pair[0].releasing) {
                handoffs.push(
                    pair[1]
                        .acquired
                        .saturating_duration_since(pair[0].releasing),
                );
            }
        }
    }
    handoffs.sort_unstable();
    #[allow(clippy::cast_precision_loss)]
    let per_acquire = attempts as f64 / grants.len().max(1) as f64;
    println!("\nSummary");
    println!("  acquisitions          {}", grants.len());
    println!(
        "  wait p50 / p99        {} / {}",
        micros(percentile(&waits, 0.5)),
        micros(percentile(&waits, 0.99))
    );
    println!(
        "  handoffs              {} (release to next holder p50 {}, p99 {})",
        handoffs.len(),
        micros(percentile(&handoffs, 0.5)),
        micros(percentile(&handoffs, 0.99))
    );
    println!("  attempts per acquire  {per_acquire:.2}");
    println!("  fencing tokens        strictly rising per lock: verified");
    println!("  overlapping holders   0: verified");
}

/// Shows the two failures a lock user must handle, as the user sees them.
async fn show_failures(
    locks: &Locks,
    plain: &mut redis::aio::MultiplexedConnection,
) -> Result<(), BoxError> {
    println!("\nWhat a holder sees when it loses its lock (an operator deletes the key):");
    let guard = locks
        .clone()
        .ttl(Duration::from_millis(300))
        .lock("orders")
        .await?;
    let _: () = redis::cmd("DEL")
        .arg("lock:{orders}")
        .query_async(plain)
        .await?;
    guard.lost().await;
    match guard.release().await {
        Err(e @ LockError::NotHeld { .. }) => println!("  lost() fired; release says: {e}"),
        other => println!("  unexpected: {other:?}"),
    }

    println!("\nWhat a waiter sees when the lock stays busy:");
    let holder = locks.lock("reports").await?;
    match locks
        .clone()
        .wait_timeout(Duration::from_millis(300))
        .lock("reports")
        .await
    {
        Err(e @ LockError::Timeout { .. }) => println!("  {e}"),
        other => println!("  unexpected: {other:?}"),
    }
    holder.release().await?;
    Ok(())
}

/// A holder paused past its lease (here its renewals stop and it sleeps, as a GC pause
/// or SIGSTOP would make it) writes after another holder did: the stores refuse it.
async fn show_fencing(
    locks: &Locks,
    plain: &mut redis::aio::MultiplexedConnection,
) -> Result<(), BoxError> {
    println!(
        "\nFencing: holder A is paused past its lease, B takes the lock, A resumes and writes:"
    );
    let a = locks
        .clone()
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .lock("billing")
        .await?;
    let a_lease = a.lease();
    std::mem::forget(a); // A's process is frozen: nothing of it runs
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = locks.lock("billing").await?;
    println!(
        "  A's fencing token {}, B's {} (B got the lock after A's lease ended)",
        a_lease.fencing_token(),
        b.fencing_token()
    );

    let _: () = redis::cmd("DEL")
        .arg("{billing}:total")
        .query_async(plain)
        .await?;
    let by_b = bump(&b, "{billing}:total", 5).invoke_async(plain).await?;
    let by_a = bump(&a_lease, "{billing}:total", 1000)
        .invoke_async(plain)
        .await;
    println!(
        "  Redis, guarded script bump.lua: B adds 5 -> {by_b}; A adds 1000 -> {}",
        match by_a {
            Err(e) => e.to_string(),
            Ok(v) => format!("{v} (unexpected)"),
        }
    );

    if PostgresServer::available() {
        let pg_server = PostgresServer::start();
        let (pg, connection) =
            tokio_postgres::connect(&pg_server.connection_string(), tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        pg.batch_execute(
            "CREATE TABLE reports (id TEXT PRIMARY KEY, body TEXT NOT NULL, fence BIGINT NOT NULL)",
        )
        .await?;
        let write = FencedUpsert::new("reports", &["id"], &["body"])?.sql();
        let b_rows = pg
            .execute(
                &write,
                &[&"r-1", &"written by B", &i64::try_from(b.fencing_token())?],
            )
            .await?;
        let a_rows = pg
            .execute(
                &write,
                &[
                    &"r-1",
                    &"written by A",
                    &i64::try_from(a_lease.fencing_token())?,
                ],
            )
            .await?;
        let row = pg
            .query_one("SELECT body, fence FROM reports WHERE id = 'r-1'", &[])
            .await?;
        println!(
            "  PostgreSQL (port {}), fenced upsert: B's write {b_rows} row, A's write {a_rows} rows \
             (refused); the row: {:?}, fence {}",
            pg_server.port(),
            row.get::<_, &str>(0),
            row.get::<_, i64>(1)
        );
    } else {
        println!("  PostgreSQL is not installed: its part is skipped (`./run demo` installs it)");
    }
    b.release().await?;
    Ok(())
}
