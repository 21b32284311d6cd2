//! Handoffs: four contenders on one lock, each holding it 1 ms and thinking 2 ms, timed
//! from a release call to the next holder having the lock, on the multi-thread runtime.
//! Ours with one handle (releases hand the lock over), ours with a handle each (release
//! notifications), the same four as threads of one blocking handle (handover too), the
//! raw pub/sub floor, and 10 ms polling.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockscript::Locks;
use lockscript::builtin::compare_del;
use redis::aio::MultiplexedConnection;

use crate::BoxError;
use crate::measure::percentile;

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
    let grants = Arc::try_unwrap(grants)
        .map_err(|_| "contenders still running")?
        .into_inner()
        .map_err(|_| "poisoned")?;
    Ok(summary(grants))
}

/// The release-to-next-holder times (µs, sorted) of `grants` and their attempts per
/// acquire.
fn summary(mut grants: Vec<Grant>) -> (Vec<f64>, f64) {
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
    (samples, per_acquire)
}

/// The same four contenders as threads of one `blocking::Locks` handle (its local queue
/// and handover), each holding the lock 1 ms and thinking 2 ms.
fn blocking_handoff(
    client: &redis::Client,
    run_for: Duration,
) -> Result<(Vec<f64>, f64), BoxError> {
    let locks = lockscript::blocking::Locks::connect(client)?.wait_timeout(Duration::from_secs(30));
    let grants = Arc::new(Mutex::new(Vec::new()));
    let stop = Instant::now() + run_for;
    let threads: Vec<_> = (0..CONTENDERS)
        .map(|_| {
            let (locks, grants) = (locks.clone(), Arc::clone(&grants));
            std::thread::spawn(move || -> Result<(), lockscript::LockError> {
                while Instant::now() < stop {
                    let asked = Instant::now();
                    let guard = locks.lock("bench:blocking-handoff")?;
                    let acquired = Instant::now();
                    std::thread::sleep(Duration::from_millis(1)); // the protected work
                    let releasing = Instant::now();
                    let attempts = guard.attempts();
                    guard.release()?;
                    if let Ok(mut grants) = grants.lock() {
                        grants.push(Grant {
                            asked,
                            acquired,
                            releasing,
                            attempts,
                        });
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().map_err(|_| "a blocking contender panicked")??;
    }
    let grants = Arc::try_unwrap(grants)
        .map_err(|_| "contenders still running")?
        .into_inner()
        .map_err(|_| "poisoned")?;
    Ok(summary(grants))
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
fn granted<C>(guard: lockscript::LockGuard<C>) -> (u32, Release)
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

/// The handoff latencies (µs, sorted) of each way to wait for a lock, and attempts per
/// acquire where they mean something.
pub struct Handoffs {
    /// Ours, the 4 contenders sharing one handle (tasks of one service): releases hand
    /// the lock over.
    pub shared: Vec<f64>,
    shared_attempts: f64,
    /// Ours, one handle each (as in 4 processes): every release publishes and the
    /// woken waiters attempt.
    pub separate: Vec<f64>,
    separate_attempts: f64,
    /// Ours, the 4 contenders threads of one `blocking::Locks` handle: releases hand the
    /// lock over.
    pub blocking: Vec<f64>,
    blocking_attempts: f64,
    /// The raw pub/sub floor: one waiter, plain redis crate.
    pub floor: Vec<f64>,
    /// Ours with `try_lock` every 10 ms.
    pub polling: Vec<f64>,
}

impl Handoffs {
    /// Measures each way for `run_for`, one after the other, as tasks on the current
    /// (multi-thread) runtime; the polling contenders use `ours`.
    pub async fn measure(
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
        let blocking_client = client.clone();
        let (blocking, blocking_attempts) = tokio::task::spawn_blocking(move || {
            blocking_handoff(&blocking_client, run_for).map_err(|e| e.to_string())
        })
        .await??;
        let floor = floor_handoff(url, run_for).await?;
        let polling = vec![polling_contender(ours.clone()); CONTENDERS];
        let (polling, _) = handoff(run_for, polling).await?;
        Ok(Self {
            shared,
            shared_attempts,
            separate,
            separate_attempts,
            blocking,
            blocking_attempts,
            floor,
            polling,
        })
    }

    /// Adds the handoff figures: percentiles of each way, and attempts per acquire.
    pub fn figures(&self, figures: &mut BTreeMap<String, f64>) {
        figures.insert("handoff_p50_us".to_owned(), percentile(&self.shared, 0.5));
        figures.insert("handoff_p99_us".to_owned(), percentile(&self.shared, 0.99));
        figures.insert("attempts_per_acquire".to_owned(), self.shared_attempts);
        figures.insert(
            "handoff_separate_p50_us".to_owned(),
            percentile(&self.separate, 0.5),
        );
        figures.insert(
            "handoff_separate_p99_us".to_owned(),
            percentile(&self.separate, 0.99),
        );
        figures.insert(
            "attempts_per_acquire_separate".to_owned(),
            self.separate_attempts,
        );
        figures.insert(
            "blocking_handoff_p50_us".to_owned(),
            percentile(&self.blocking, 0.5),
        );
        figures.insert(
            "blocking_handoff_p99_us".to_owned(),
            percentile(&self.blocking, 0.99),
        );
        figures.insert(
            "attempts_per_acquire_blocking".to_owned(),
            self.blocking_attempts,
        );
        figures.insert(
            "floor_handoff_p50_us".to_owned(),
            percentile(&self.floor, 0.5),
        );
        figures.insert(
            "floor_handoff_p99_us".to_owned(),
            percentile(&self.floor, 0.99),
        );
        figures.insert(
            "poll_handoff_p50_us".to_owned(),
            percentile(&self.polling, 0.5),
        );
    }
}
