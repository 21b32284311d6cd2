//! A chaos worker process: several actors doing what users do, each grant's critical
//! section a series of fenced writes made only after the guard says it still holds the
//! lock, every step recorded.
//!
//! The actors: three tasks sharing one handle (handover), a task with its own handle
//! (release notifications), a `try_lock` poller, a `with_lock` user, one that extends
//! and then drops its guard without releasing, one whose `lock()` futures are
//! cancelled, and (on one server) two threads sharing a `blocking::Locks` handle (its
//! local queue and handover). Except on Redlock, the primitives on the waiter queue
//! have names of their own: a fair lock (`fair*`), read/write locks (`rw*`, some writes
//! downgraded) and a semaphore (`sem*`). A long-lease actor (`long*`, 2 s leases) has its
//! renewals and suspicions recorded, and (but on the cluster) a pooled actor runs three
//! tasks on a handle over a pool of connections ([`RoundRobin`]). Except on Redlock, a
//! multi-lock actor ([`multi`]) takes two or three of the single locks' names at once; on
//! every topology two candidates campaign in an election while an observer follows it
//! ([`election`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockscript::{
    Delivery, Lease, LockError, LockGuard, Locks, Permit, ReadGuard, Redlock, WriteGuard, blocking,
    lock_script,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use super::history::{Event, Recorder};
use super::pool::RoundRobin;

mod election;
mod multi;

/// Writes `value` under fencing token `token`, and logs the accepted token.
#[lock_script("chaos/fenced-append.lua")]
pub fn fenced_append(
    #[key] value: &str,
    #[key] seen: &str,
    #[key] log: &str,
    token: u64,
    writer: &str,
) -> i64;

/// Writes `value` and logs `token`, only while `guard` holds the lock (on its server).
#[lock_script("chaos/append.lua", guarded)]
pub fn guarded_append(#[key] value: &str, #[key] log: &str, token: u64, writer: &str) -> i64;

/// How long a store write may take: the response timeout the locks use.
const WRITE_TIMEOUT: Duration = lockscript::DEFAULT_RESPONSE_TIMEOUT;

/// Where the critical sections write guarded, besides the fenced store every topology
/// writes to (`fenced-append.lua` on a separate server, never faulted, its clock never
/// moved: the fence holds by tokens alone, whatever the lock servers' clocks did). Redlock
/// writes there only, since a quorum's grant cannot guard a script.
enum Data {
    /// One server: guarded writes (`append.lua`) over the locks' own faulty path.
    Node(redis::aio::ConnectionManager),
    /// A cluster: guarded writes, routed to the lock's master.
    Cluster(lockscript::ClusterConnection),
}

/// The store's keys for lock `name`: value, highest token seen, log of accepted tokens.
pub fn store_keys(name: &str) -> [String; 3] {
    [
        format!("data:{{{name}}}"),
        format!("data:{{{name}}}:seen"),
        format!("data:{{{name}}}:log"),
    ]
}

/// The servers a topology locks on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Topology {
    /// One redis-server, no persistence.
    Single,
    /// One redis-server with `appendonly yes`, `appendfsync always`.
    Aof,
    /// A Redis Cluster of three masters with a replica each.
    Cluster,
    /// Five independent masters.
    Redlock,
}

impl Topology {
    /// Every topology.
    pub const ALL: [Topology; 4] = [
        Topology::Single,
        Topology::Aof,
        Topology::Cluster,
        Topology::Redlock,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Topology::Single => "single",
            Topology::Aof => "aof",
            Topology::Cluster => "cluster",
            Topology::Redlock => "redlock",
        }
    }
}

/// What a worker process is told to do (passed as JSON in an environment variable).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerConfig {
    /// Its number.
    pub worker: u32,
    /// Where the locks live.
    pub topology: Topology,
    /// The lock servers (through their proxies), or the cluster's nodes, as the lock
    /// user.
    pub urls: Vec<String>,
    /// The lock servers through the proxies that serve the pooled actor alone (none on
    /// a cluster).
    #[serde(default)]
    pub pool_urls: Vec<String>,
    /// The fenced store (never faulted, its clock never moved), every topology's; the
    /// topologies but Redlock also write to the lock's own server through guarded scripts.
    pub store: String,
    /// Seeds its choices.
    pub seed: u64,
    /// How long to run.
    pub run_for_ms: u64,
    /// The lease.
    pub ttl_ms: u64,
    /// `lock()`'s wait.
    pub wait_ms: u64,
    /// Where to record.
    pub out: PathBuf,
    /// A known bug to put back (`no-deadline`).
    pub mutant: Option<String>,
}

/// The environment variable that carries a worker's configuration.
pub const CONFIG_VAR: &str = "LOCKSCRIPT_CHAOS_WORKER";

/// What the actors share.
struct Ctx {
    rec: Recorder,
    cfg: WorkerConfig,
    grants: AtomicU64,
    stop: AtomicBool,
    /// The guarded path (`None` on Redlock).
    data: Option<Data>,
    /// The fenced store.
    store: redis::aio::MultiplexedConnection,
    /// Turns `true` once every actor's handle is made: the actors start together, so
    /// that no measured call overlaps the worker's own start (its connections made).
    ready: tokio::sync::watch::Receiver<bool>,
}

impl Ctx {
    /// Waits until every actor's handle is made.
    async fn ready(&self) {
        let _ = self.ready.clone().wait_for(|ready| *ready).await;
    }

    /// Resolves once the worker is told to stop (for the calls that may wait longer
    /// than a run's end: a campaign, an observer's wait for the next leader).
    async fn stopped(&self) {
        while !self.stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// [`ready`](Self::ready), for the blocking actor's threads.
    fn ready_blocking(&self) {
        while !*self.ready.borrow() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.cfg.ttl_ms)
    }

    /// How this worker's scripts reach the servers: odd workers by Redis Functions, so
    /// both deliveries meet the same faults (a restart without persistence loses the
    /// library as it loses the script cache).
    fn delivery(&self) -> Delivery {
        if self.cfg.worker % 2 == 1 {
            Delivery::Functions
        } else {
            Delivery::Scripts
        }
    }

    /// The lease's validity from its start: ttl minus 1% + 2 ms.
    fn validity(&self) -> Duration {
        validity(self.ttl())
    }

    fn now(&self) -> u64 {
        self.rec.ns(Instant::now())
    }

    fn record(&self, event: &Event) {
        self.rec.record(event);
    }

    fn call(&self, kind: &str, lock: &str, started: Instant, outcome: &str, detail: String) {
        self.record(&Event::Call {
            worker: self.cfg.worker,
            kind: kind.to_owned(),
            lock: lock.to_owned(),
            outcome: outcome.to_owned(),
            detail,
            t_start: self.rec.ns(started),
            t_end: self.now(),
        });
    }

    /// Records a grant of `lock` (whose lease ends at `valid_until`) and numbers it.
    fn granted(&self, lock: &str, fence: u64, how: &str, valid_until: Instant) -> u64 {
        self.granted_after(lock, fence, how, valid_until, None)
    }

    /// [`granted`](Self::granted), for a lease of `ttl` (not the worker's).
    fn granted_for(&self, lock: &str, fence: u64, how: &str, lease: &Lease, ttl: Duration) -> u64 {
        let requested = lease.valid_until().checked_sub(validity(ttl));
        self.granted_after(lock, fence, how, lease.valid_until(), requested)
    }

    /// [`granted`](Self::granted), for a grant the server made no earlier than
    /// `requested` (when known better than from its lease). A grant from the queue may
    /// come with less than a full lease (a claim lease, or what was left of one that was
    /// handed over while this worker was frozen), so its lease does not tell when it was
    /// made: its `lock()`'s start is the bound.
    fn granted_after(
        &self,
        lock: &str,
        fence: u64,
        how: &str,
        valid_until: Instant,
        requested: Option<Instant>,
    ) -> u64 {
        let grant = self.grants.fetch_add(1, Ordering::Relaxed) + 1;
        let valid_until = self.rec.ns(valid_until);
        let t_sent = match requested {
            Some(at) => self.rec.ns(at),
            None => valid_until
                .saturating_sub(u64::try_from(self.validity().as_nanos()).unwrap_or(u64::MAX)),
        };
        self.record(&Event::Grant {
            worker: self.cfg.worker,
            grant,
            lock: lock.to_owned(),
            fence,
            how: how.to_owned(),
            t_sent,
            t: self.now(),
            valid_until,
        });
        grant
    }

    /// Records how a `lock()` call on `lock` that began at `started` ended; the guard if
    /// it got one.
    fn locked<G>(&self, lock: &str, started: Instant, result: Result<G, LockError>) -> Option<G> {
        self.waited("lock", lock, started, result)
    }

    /// [`locked`](Self::locked), for a call of `kind` that waits as `lock()` does
    /// (`lock_all`, whose `lock` is its names joined by `+`).
    fn waited<G>(
        &self,
        kind: &str,
        lock: &str,
        started: Instant,
        result: Result<G, LockError>,
    ) -> Option<G> {
        let (outcome, detail) = match &result {
            Ok(_) => ("ok", String::new()),
            Err(e @ LockError::Timeout { .. }) => ("timeout", e.to_string()),
            Err(e) => ("error", e.to_string()),
        };
        self.call(kind, lock, started, outcome, detail);
        result.ok()
    }

    /// Records a holder's `is_lost()` before a write; whether it may write. The time is
    /// read before the lease is asked, so a check happened at its recorded time or later:
    /// read after, it could lie later than the check by however long the thread was
    /// descheduled between the two, and a check that came before another holder's grant
    /// would be recorded after it (an overlap of a few ms that never happened).
    fn may_write(&self, grant: u64, is_lost: impl FnOnce() -> bool) -> bool {
        let t = self.now();
        let lost = is_lost();
        self.record(&Event::Check {
            worker: self.cfg.worker,
            grant,
            lost,
            t,
        });
        !lost
    }

    /// One write of the critical section of `lease` (a grant of `lock`): guarded on the
    /// lock's server (but on Redlock), then fenced in the separate store; each recorded.
    async fn write(&self, grant: u64, lease: &Lease, lock: &str, writer: &str) {
        let [value, seen, log] = store_keys(lock);
        let token = lease.fencing_token();
        if let Some(data) = &self.data {
            let guarded =
                || guarded_append(lease, &value, &log, token, writer).delivery(self.delivery());
            let t_sent = self.now();
            let written = match data {
                Data::Node(conn) => within(guarded(), conn.clone()).await,
                Data::Cluster(conn) => within(guarded(), conn.clone()).await,
            };
            self.wrote(grant, t_sent, &written, "guarded");
        }
        let t_sent = self.now();
        let written = within(
            fenced_append(&value, &seen, &log, token, writer),
            self.store.clone(),
        )
        .await;
        self.wrote(grant, t_sent, &written, "fenced");
    }

    /// Records a write to `store` sent at `t_sent` and what the store answered.
    fn wrote(&self, grant: u64, t_sent: u64, written: &Result<i64, LockError>, store: &str) {
        let outcome = match written {
            Ok(1) => "written",
            Ok(_) | Err(LockError::NotHeld { .. } | LockError::Stale { .. }) => "refused",
            Err(_) => "error",
        };
        self.record(&Event::Write {
            worker: self.cfg.worker,
            grant,
            outcome: outcome.to_owned(),
            t_sent,
            t_done: self.now(),
            store: store.to_owned(),
        });
    }

    /// A pause between two writes of a section: up to two thirds of a lease.
    fn pause(&self, rng: &mut StdRng) -> Duration {
        Duration::from_millis(rng.random_range(0..=self.cfg.ttl_ms * 2 / 3))
    }

    /// Records that the holder of `grant` saw its lease valid until `valid_until` (its
    /// grant's, or a confirmed renewal's), the next renewal of its `ttl` due a third of
    /// the way.
    fn renewal(&self, grant: u64, valid_until: Instant, ttl: Duration) {
        let due = valid_until
            .checked_sub(validity(ttl))
            .map_or(valid_until, |sent| sent + ttl / 3);
        self.record(&Event::Renewal {
            worker: self.cfg.worker,
            grant,
            t: self.now(),
            valid_until: self.rec.ns(valid_until),
            due: self.rec.ns(due),
        });
    }

    /// Records that the holder of `grant` begins to give it up now, and returns when.
    fn releasing(&self, grant: u64) -> Instant {
        let now = Instant::now();
        self.record(&Event::Releasing {
            worker: self.cfg.worker,
            grant,
            t: self.rec.ns(now),
        });
        now
    }

    /// Records the end of a grant whose release (or drop) began at `started`, when the
    /// lease was valid until `valid_until` as its holder knew it.
    fn ended(&self, grant: u64, outcome: &str, started: Instant, valid_until: Instant) {
        self.record(&Event::Release {
            worker: self.cfg.worker,
            grant,
            outcome: outcome.to_owned(),
            t_start: self.rec.ns(started),
            t_end: self.now(),
            valid_until: self.rec.ns(valid_until),
        });
    }
}

/// Runs a store write on `conn`, bounded by [`WRITE_TIMEOUT`] (a timeout is an I/O error:
/// the write may have happened).
async fn within<C: redis::aio::ConnectionLike>(
    call: lockscript::Invocation<i64>,
    mut conn: C,
) -> Result<i64, LockError> {
    tokio::time::timeout(WRITE_TIMEOUT, call.invoke_async(&mut conn))
        .await
        .unwrap_or_else(|_| {
            Err(LockError::Redis(redis::RedisError::from(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no reply within the write timeout",
                ),
            )))
        })
}

fn outcome_of(result: &Result<(), LockError>) -> &'static str {
    match result {
        Ok(()) => "released",
        Err(LockError::NotHeld { .. }) => "not_held",
        Err(LockError::Lost { .. }) => "lost",
        Err(_) => "error",
    }
}

/// A lock name: mostly one of two hot ones, sometimes one of many cold ones.
fn pick_name(rng: &mut StdRng) -> String {
    if rng.random_bool(0.75) {
        format!("hot{}", rng.random_range(0..2))
    } else {
        format!("cold{}", rng.random_range(0..24))
    }
}

/// The async handles of a topology, over one guard type each.
trait Taker: Clone + Send + Sync + 'static {
    type Guard: Held;
    fn lock(&self, name: &str) -> impl Future<Output = Result<Self::Guard, LockError>> + Send;
    fn try_lock(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Self::Guard>, LockError>> + Send;
    fn with_lock<T: Send, F, Fut>(
        &self,
        name: &str,
        work: F,
    ) -> impl Future<Output = Result<T, LockError>> + Send
    where
        F: FnOnce(Lease) -> Fut + Send,
        Fut: Future<Output = T> + Send;
}

/// What the actors do with a guard.
trait Held: Send + Sync + 'static {
    fn lease(&self) -> Lease;
    fn attempts(&self) -> u32;
    fn extend(&self, ttl: Duration) -> impl Future<Output = Result<(), LockError>> + Send;
    fn release(self) -> impl Future<Output = Result<(), LockError>> + Send;
}

macro_rules! taker {
    ($handle:ident, $guard:ident) => {
        impl<C> Taker for lockscript::$handle<C>
        where
            C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
        {
            type Guard = lockscript::$guard<C>;
            async fn lock(&self, name: &str) -> Result<Self::Guard, LockError> {
                lockscript::$handle::lock(self, name).await
            }
            async fn try_lock(&self, name: &str) -> Result<Option<Self::Guard>, LockError> {
                lockscript::$handle::try_lock(self, name).await
            }
            async fn with_lock<T: Send, F, Fut>(&self, name: &str, work: F) -> Result<T, LockError>
            where
                F: FnOnce(Lease) -> Fut + Send,
                Fut: Future<Output = T> + Send,
            {
                lockscript::$handle::with_lock(self, name, work).await
            }
        }

        impl<C> Held for lockscript::$guard<C>
        where
            C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
        {
            fn lease(&self) -> Lease {
                lockscript::LeaseGuard::lease(self)
            }
            fn attempts(&self) -> u32 {
                lockscript::Lease::attempts(self)
            }
            async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
                lockscript::LeaseGuard::extend(self, ttl).await
            }
            async fn release(self) -> Result<(), LockError> {
                lockscript::$guard::release(self).await
            }
        }
    };
}

taker!(Locks, LockGuard);
taker!(Redlock, RedlockGuard);

/// How long a holder keeps listening for `lost()` after its release returned `Ok`: a
/// renewal sent before the release is answered within a response timeout of it, plus
/// the scheduling slack. The guide: a lease released in time never fires.
pub const LINGER: Duration =
    lockscript::DEFAULT_RESPONSE_TIMEOUT.saturating_add(Duration::from_millis(250));

/// The long-lease actor's lease: long enough that a renewal can fail (no reply within
/// the response timeout) and be retried well within the lease, so the suspect bound
/// (the renewal's due time plus the response timeout plus the slack) falls before the
/// validity end and can be checked.
pub const LONG_TTL: Duration = Duration::from_secs(2);

/// A lease's validity from its start: `ttl` minus 1% + 2 ms.
fn validity(ttl: Duration) -> Duration {
    ttl.saturating_sub(ttl / 100 + Duration::from_millis(2))
}

/// The watcher of one lease (see [`watch`]); told when its holder is done with it.
struct Watch(tokio::sync::oneshot::Sender<bool>);

impl Watch {
    /// The holder is done: `released` when its release returned `Ok` (the watcher then
    /// listens for a loss [`LINGER`] longer: there must be none).
    fn finish(self, released: bool) {
        let _ = self.0.send(released);
    }
}

/// Watches a lease until its holder is done with it: records when `lost()` fired; with
/// `renewals` (the lease's ttl), each validity end it moves to (with the next renewal's
/// due time) and each time it turns suspect.
fn watch(ctx: &Arc<Ctx>, grant: u64, lease: Lease, renewals: Option<Duration>) -> Watch {
    let (done, mut finished) = tokio::sync::oneshot::channel::<bool>();
    let ctx = Arc::clone(ctx);
    tokio::spawn(async move {
        let lost = |ctx: &Ctx| {
            ctx.record(&Event::Lost {
                worker: ctx.cfg.worker,
                grant,
                t: ctx.now(),
                valid_until: ctx.rec.ns(lease.valid_until()),
            });
        };
        let mut seen = lease.valid_until();
        if let Some(ttl) = renewals {
            ctx.renewal(grant, seen, ttl);
        }
        let mut suspected = false;
        loop {
            tokio::select! {
                biased;
                () = lease.lost() => return lost(&ctx),
                released = &mut finished => {
                    if released == Ok(true) {
                        tokio::select! {
                            () = lease.lost() => lost(&ctx),
                            () = tokio::time::sleep(LINGER) => {}
                        }
                    }
                    return;
                }
                () = lease.suspect(), if renewals.is_some() && !suspected => {
                    let t = ctx.now();
                    if lease.is_suspect() {
                        suspected = true;
                        ctx.record(&Event::Suspect {
                            worker: ctx.cfg.worker,
                            grant,
                            t,
                            valid_until: ctx.rec.ns(lease.valid_until()),
                        });
                    }
                }
                () = tokio::time::sleep(Duration::from_millis(5)), if renewals.is_some() => {
                    let now = lease.valid_until();
                    if now != seen && !lease.is_lost() {
                        seen = now;
                        ctx.renewal(grant, seen, renewals.unwrap_or_default());
                    }
                    // A confirmed renewal clears the suspicion: the next failure is news.
                    suspected = suspected && lease.is_suspect();
                }
            }
        }
    });
    Watch(done)
}

/// The critical section: a few fenced writes, each only after `is_lost()` said the
/// lease still holds, with pauses in between (sometimes past a renewal or two).
async fn section(ctx: &Ctx, grant: u64, lock: &str, lease: &Lease, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let writer = format!("w{}g{grant}", ctx.cfg.worker);
    for i in 0..rng.random_range(1..=3) {
        if i > 0 {
            tokio::time::sleep(ctx.pause(&mut rng)).await;
        }
        if !ctx.may_write(grant, || lease.is_lost()) {
            return;
        }
        ctx.write(grant, lease, lock, &writer).await;
    }
}

/// Takes a lock with `lock()` (or `try_lock()`), runs the section, then releases or
/// (when `drop_it`) extends and drops the guard. A grant on the pooled handle is
/// recorded as `pool`.
async fn take_and_hold<T: Taker>(
    ctx: &Arc<Ctx>,
    locks: &T,
    rng: &mut StdRng,
    style: Style,
    pooled: bool,
) {
    let name = pick_name(rng);
    let started = Instant::now();
    let guard = match style {
        Style::TryLock => match locks.try_lock(&name).await {
            Ok(Some(guard)) => {
                ctx.call("try_lock", &name, started, "ok", String::new());
                guard
            }
            Ok(None) => {
                ctx.call("try_lock", &name, started, "held", String::new());
                tokio::time::sleep(Duration::from_millis(rng.random_range(1..20))).await;
                return;
            }
            Err(e) => {
                ctx.call("try_lock", &name, started, "error", e.to_string());
                tokio::time::sleep(Duration::from_millis(20)).await;
                return;
            }
        },
        Style::Lock | Style::Drop => {
            let Some(guard) = ctx.locked(&name, started, locks.lock(&name).await) else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                return;
            };
            guard
        }
    };
    let lease = guard.lease();
    let how = match style {
        _ if pooled => "pool",
        Style::TryLock => "try_lock",
        _ if guard.attempts() == 0 => "handover",
        _ => "lock",
    };
    let grant = ctx.granted(&name, lease.fencing_token(), how, lease.valid_until());
    let done = watch(ctx, grant, lease.clone(), None);
    section(ctx, grant, &name, &lease, rng.random()).await;
    let ending = ctx.releasing(grant);
    let valid_until = lease.valid_until();
    if style == Style::Drop {
        let extended = guard.extend(ctx.ttl()).await;
        let outcome = if extended.is_ok() { "ok" } else { "error" };
        ctx.call("extend", &name, ending, outcome, String::new());
        drop(guard);
        ctx.ended(grant, "dropped", ending, valid_until);
        done.finish(false);
    } else {
        let released = guard.release().await;
        let outcome = outcome_of(&released);
        ctx.call("release", &name, ending, outcome, String::new());
        ctx.ended(grant, outcome, ending, valid_until);
        done.finish(released.is_ok());
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    Lock,
    TryLock,
    Drop,
}

/// `with_lock`: the section runs inside it.
async fn with_lock_once<T: Taker>(ctx: &Arc<Ctx>, locks: &T, rng: &mut StdRng) {
    let name = pick_name(rng);
    let started = Instant::now();
    let seed: u64 = rng.random();
    let record: Arc<std::sync::Mutex<Option<WithLock>>> = Arc::default();
    let result = {
        let (ctx, name, record) = (Arc::clone(ctx), name.clone(), Arc::clone(&record));
        locks
            .with_lock(&name.clone(), move |lease| async move {
                let grant = ctx.granted(
                    &name,
                    lease.fencing_token(),
                    "with_lock",
                    lease.valid_until(),
                );
                let done = watch(&ctx, grant, lease.clone(), None);
                *record.lock().unwrap() = Some(WithLock {
                    grant,
                    done,
                    lease: lease.clone(),
                    section_end: None,
                });
                section(&ctx, grant, &name, &lease, seed).await;
                if let Some(r) = record.lock().unwrap().as_mut() {
                    r.section_end = Some((ctx.releasing(grant), lease.valid_until()));
                }
            })
            .await
    };
    let ended = record.lock().unwrap().take();
    if let Some(r) = ended {
        // The release began when the section ended (or, cut short by the loss, now).
        let (ending, valid_until) = match r.section_end {
            Some((ending, valid_until)) => {
                // with_lock's release: from the end of the work to its return.
                ctx.call("release", &name, ending, outcome_of(&result), String::new());
                (ending, valid_until)
            }
            None => (Instant::now(), r.lease.valid_until()),
        };
        ctx.ended(r.grant, outcome_of(&result), ending, valid_until);
        r.done.finish(result.is_ok());
    } else {
        // No grant: with_lock's own lock() failed.
        ctx.locked(&name, started, result);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What `with_lock`'s work leaves for the record: its grant, the sender that ends its
/// watcher, its lease, and when the section ended with the validity end it then had.
struct WithLock {
    grant: u64,
    done: Watch,
    lease: Lease,
    section_end: Option<(Instant, Instant)>,
}

/// A `lock()` cancelled after a few milliseconds, or granted and released at once.
async fn cancelled_lock<T: Taker>(ctx: &Arc<Ctx>, locks: &T, rng: &mut StdRng, pooled: bool) {
    let name = pick_name(rng);
    let cutoff = Duration::from_micros(rng.random_range(0..20_000));
    let started = Instant::now();
    if let Ok(Ok(guard)) = tokio::time::timeout(cutoff, locks.lock(&name)).await {
        let lease = guard.lease();
        let how = if pooled { "pool" } else { "lock" };
        let grant = ctx.granted(&name, lease.fencing_token(), how, lease.valid_until());
        let done = watch(ctx, grant, lease.clone(), None);
        let (ending, valid_until) = (ctx.releasing(grant), lease.valid_until());
        let released = guard.release().await;
        let outcome = outcome_of(&released);
        ctx.call("release", &name, ending, outcome, String::new());
        ctx.ended(grant, outcome, ending, valid_until);
        done.finish(released.is_ok());
    } else {
        ctx.call("cancelled_lock", &name, started, "cancelled", String::new());
        tokio::time::sleep(Duration::from_millis(rng.random_range(1..30))).await;
    }
}

/// One actor: `role` 0 locks, 1 tries, 2 runs `with_lock`, 3 locks and half the time
/// extends and drops its guard, 4 cancels `lock()` futures. `pooled`: its handle is over
/// a pool of connections (its grants are recorded as `pool`).
async fn actor<T: Taker>(ctx: Arc<Ctx>, locks: T, seed: u64, role: u32, pooled: bool) {
    let mut rng = StdRng::seed_from_u64(seed);
    ctx.ready().await;
    while !ctx.stop.load(Ordering::Relaxed) {
        match role {
            0 => take_and_hold(&ctx, &locks, &mut rng, Style::Lock, pooled).await,
            1 => take_and_hold(&ctx, &locks, &mut rng, Style::TryLock, pooled).await,
            2 => with_lock_once(&ctx, &locks, &mut rng).await,
            3 => {
                let style = if rng.random_bool(0.5) {
                    Style::Drop
                } else {
                    Style::Lock
                };
                take_and_hold(&ctx, &locks, &mut rng, style, pooled).await;
            }
            _ => cancelled_lock(&ctx, &locks, &mut rng, pooled).await,
        }
    }
}

/// The pooled actor: three tasks on one handle over a pool of connections (it locks;
/// it locks, extends and drops; it cancels `lock()`s), so a lease's commands, a grant
/// and its background release travel on different connections.
fn pooled_actors<T: Taker>(ctx: &Arc<Ctx>, locks: &T) -> Vec<tokio::task::JoinHandle<()>> {
    let seed = ctx.cfg.seed;
    [0u32, 3, 4]
        .into_iter()
        .map(|role| {
            tokio::spawn(actor(
                Arc::clone(ctx),
                locks.clone(),
                seed ^ (u64::from(role) + 0x90),
                role,
                true,
            ))
        })
        .collect()
}

/// How many connections the pooled actor's pool has (per server).
const POOL_SIZE: usize = 3;

/// The long-lease actor: `lock()` on a `long*` name with [`LONG_TTL`] leases, held for a
/// second or two (several renewals) with a write every few hundred ms, released; its
/// renewals and suspicions recorded (the suspect bound is checked on them).
async fn long_actor<T: Taker>(ctx: Arc<Ctx>, locks: T, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    ctx.ready().await;
    while !ctx.stop.load(Ordering::Relaxed) {
        let name = format!("long{}", rng.random_range(0..2));
        let started = Instant::now();
        let Some(guard) = ctx.locked(&name, started, locks.lock(&name).await) else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let lease = guard.lease();
        let grant = ctx.granted_for(&name, lease.fencing_token(), "long", &lease, LONG_TTL);
        let done = watch(&ctx, grant, lease.clone(), Some(LONG_TTL));
        let writer = format!("w{}g{grant}", ctx.cfg.worker);
        for _ in 0..rng.random_range(3..=8) {
            tokio::time::sleep(Duration::from_millis(rng.random_range(100..400))).await;
            if !ctx.may_write(grant, || lease.is_lost()) {
                break;
            }
            ctx.write(grant, &lease, &name, &writer).await;
        }
        let (ending, valid_until) = (ctx.releasing(grant), lease.valid_until());
        let released = guard.release().await;
        let outcome = outcome_of(&released);
        ctx.call("release", &name, ending, outcome, String::new());
        ctx.ended(grant, outcome, ending, valid_until);
        done.finish(released.is_ok());
    }
}

/// Spawns every async actor on `shared` (three tasks on one handle) and `own` (one
/// handle per actor, made by `make`).
async fn spawn_actors<T, M, MF>(ctx: &Arc<Ctx>, make: M) -> Vec<tokio::task::JoinHandle<()>>
where
    T: Taker,
    M: Fn() -> MF,
    MF: Future<Output = T>,
{
    let mut tasks = Vec::new();
    let shared = make().await;
    let seed = ctx.cfg.seed;
    for i in 0..3 {
        tasks.push(tokio::spawn(actor(
            Arc::clone(ctx),
            shared.clone(),
            seed ^ (i + 1),
            0,
            false,
        )));
    }
    for role in 0..5u32 {
        let own = make().await;
        tasks.push(tokio::spawn(actor(
            Arc::clone(ctx),
            own,
            seed ^ (u64::from(role) + 10),
            role,
            false,
        )));
    }
    tasks
}

/// The permits of the chaos semaphores (`sem*` names).
pub const PERMITS: u32 = 2;

/// The primitives on the waiter queue (one server or a cluster, not Redlock), each on
/// names of its own: a fair lock (`fair*`), read/write locks (`rw*`) and a semaphore of
/// [`PERMITS`] permits (`sem*`), every actor with a handle of its own.
/// The actors of every kind but the single lock's on a handle over one server or a
/// cluster: the waiter queue's, the multi-lock's, the election's.
async fn one_server_kinds<C, M, MF>(ctx: &Arc<Ctx>, make: M) -> Vec<tokio::task::JoinHandle<()>>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
    M: Fn() -> MF,
    MF: Future<Output = Locks<C>>,
{
    let mut tasks = queued_actors(ctx, &make).await;
    tasks.extend(multi::actors(ctx, &make).await);
    let elect = |name| {
        let handle = make();
        async move { handle.await.election(name) }
    };
    tasks.extend(election::actors(ctx, elect).await);
    tasks
}

async fn queued_actors<C, M, MF>(ctx: &Arc<Ctx>, make: M) -> Vec<tokio::task::JoinHandle<()>>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
    M: Fn() -> MF,
    MF: Future<Output = Locks<C>>,
{
    let seed = ctx.cfg.seed;
    let mut tasks = Vec::new();
    for i in 0..2 {
        tasks.push(tokio::spawn(fair_actor(
            Arc::clone(ctx),
            make().await.fair(true),
            seed ^ (0x51 + i),
        )));
        tasks.push(tokio::spawn(rw_actor(
            Arc::clone(ctx),
            make().await.rw(),
            seed ^ (0x61 + i),
        )));
        tasks.push(tokio::spawn(sem_actor(
            Arc::clone(ctx),
            make().await.semaphore(PERMITS),
            seed ^ (0x71 + i),
        )));
    }
    tasks
}

/// Holds a grant of `name` (its `lease`, granted `how`): records it, watches its loss,
/// runs its section (fenced writes when `writes`, else checks only: a reader or a
/// permit cannot guard a script), then `release`s it and records the end. A downgrade
/// (`downgrades`) ends the grant but not the lease, which the read grant goes on with:
/// its later loss is the read's.
async fn hold<F, Fut>(
    ctx: &Arc<Ctx>,
    name: &str,
    lease: &Lease,
    (how, requested): (&str, Instant),
    (writes, downgrades): (bool, bool),
    seed: u64,
    release: F,
) where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<(), LockError>>,
{
    let fence = lease.fencing_token();
    let grant = ctx.granted_after(name, fence, how, lease.valid_until(), Some(requested));
    let done = watch(ctx, grant, lease.clone(), None);
    if writes {
        section(ctx, grant, name, lease, seed).await;
    } else {
        let mut rng = StdRng::seed_from_u64(seed);
        for i in 0..rng.random_range(1..=3) {
            if i > 0 {
                tokio::time::sleep(ctx.pause(&mut rng)).await;
            }
            if !ctx.may_write(grant, || lease.is_lost()) {
                break;
            }
        }
    }
    let (ending, valid_until) = (ctx.releasing(grant), lease.valid_until());
    let released = release().await;
    let outcome = outcome_of(&released);
    ctx.call("release", name, ending, outcome, String::new());
    ctx.ended(grant, outcome, ending, valid_until);
    done.finish(released.is_ok() && !downgrades);
}

/// A fair lock's user: `lock()` on the one `fair*` name (a long queue, so the checker
/// sees waits long enough to check their order), a section of fenced writes, release.
async fn fair_actor<C>(ctx: Arc<Ctx>, locks: Locks<C>, seed: u64)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut rng = StdRng::seed_from_u64(seed);
    ctx.ready().await;
    // The handle's handoff channel subscribed before the first recorded wait.
    let warm = format!("warm-{}-{seed}", ctx.cfg.worker);
    if let Ok(guard) = locks.lock(&warm).await {
        let _ = guard.release().await;
    }
    while !ctx.stop.load(Ordering::Relaxed) {
        let name = format!("{}0", super::checker::FAIR_PREFIX);
        let grant = (name.as_str(), "fair", true);
        take(
            &ctx,
            grant,
            rng.random(),
            locks.lock(&name),
            LockGuard::lease,
            LockGuard::release,
        )
        .await;
    }
}

/// One wait of a primitive on the queue (`acquired`), recorded; a grant, held.
async fn take<G, RF>(
    ctx: &Arc<Ctx>,
    (name, how, writes): (&str, &str, bool),
    seed: u64,
    acquired: impl Future<Output = Result<G, LockError>>,
    lease_of: impl FnOnce(&G) -> Lease,
    release: impl FnOnce(G) -> RF,
) where
    RF: Future<Output = Result<(), LockError>>,
{
    let started = Instant::now();
    let Some(guard) = ctx.locked(name, started, acquired.await) else {
        tokio::time::sleep(Duration::from_millis(20)).await;
        return;
    };
    let lease = lease_of(&guard);
    hold(
        ctx,
        name,
        &lease,
        (how, started),
        (writes, false),
        seed,
        || release(guard),
    )
    .await;
}

/// A read/write lock's user on `rw*` names: mostly reads; writes with a section of
/// fenced writes, a third of them downgraded to a read afterwards.
async fn rw_actor<C>(ctx: Arc<Ctx>, rw: lockscript::RwLocks<C>, seed: u64)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut rng = StdRng::seed_from_u64(seed);
    ctx.ready().await;
    while !ctx.stop.load(Ordering::Relaxed) {
        let name = format!("rw{}", rng.random_range(0..2));
        let seed = rng.random();
        if rng.random_bool(0.7) {
            let read = rw.read(&name);
            take(
                &ctx,
                (&name, "read", false),
                seed,
                read,
                |guard| guard.lease(),
                ReadGuard::release,
            )
            .await;
            continue;
        }
        if !rng.random_bool(0.3) {
            let write = rw.write(&name);
            take(
                &ctx,
                (&name, "write", true),
                seed,
                write,
                |guard| guard.lease(),
                WriteGuard::release,
            )
            .await;
            continue;
        }
        let started = Instant::now();
        let Some(guard) = ctx.locked(&name, started, rw.write(&name).await) else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let lease = guard.lease();
        // Write, then downgrade: the write grant ends with the downgrade, and the read
        // grant it becomes (the same fencing token) is held like any other read.
        let read = std::sync::Mutex::new(None);
        let downgraded = std::sync::Mutex::new(started);
        hold(
            &ctx,
            &name,
            &lease,
            ("write", started),
            (true, true),
            rng.random(),
            || async {
                *downgraded.lock().unwrap() = Instant::now();
                *read.lock().unwrap() = Some(guard.downgrade().await?);
                Ok(())
            },
        )
        .await;
        let read = read.into_inner().unwrap();
        if let Some(read) = read {
            let lease = read.lease();
            let at = downgraded.into_inner().unwrap();
            hold(
                &ctx,
                &name,
                &lease,
                ("downgrade", at),
                (false, false),
                rng.random(),
                || read.release(),
            )
            .await;
        }
    }
}

/// A semaphore's user on `sem*` names: a permit, a few checks, release.
async fn sem_actor<C>(ctx: Arc<Ctx>, sem: lockscript::Semaphores<C>, seed: u64)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut rng = StdRng::seed_from_u64(seed);
    ctx.ready().await;
    let how = format!("permit:{}", sem.permits());
    while !ctx.stop.load(Ordering::Relaxed) {
        let name = format!("sem{}", rng.random_range(0..2));
        let permit = sem.acquire(&name);
        take(
            &ctx,
            (&name, &how, false),
            rng.random(),
            permit,
            |permit| permit.lease(),
            Permit::release,
        )
        .await;
    }
}

/// Sync connections for guarded and fenced writes, each opened anew after any error (a late reply must
/// never be read as the next command's).
struct SyncData {
    client: redis::Client,
    conn: Option<redis::Connection>,
    /// The fenced store, and a connection to it.
    store: redis::Client,
    store_conn: Option<redis::Connection>,
    /// The worker's [`Ctx::delivery`].
    delivery: Delivery,
}

/// A sync connection to `client` with the write timeout, `kept` if there is one.
fn sync_conn(
    client: &redis::Client,
    kept: Option<redis::Connection>,
) -> Result<redis::Connection, LockError> {
    if let Some(conn) = kept {
        return Ok(conn);
    }
    let conn = client.get_connection_with_timeout(WRITE_TIMEOUT)?;
    conn.set_read_timeout(Some(WRITE_TIMEOUT))?;
    conn.set_write_timeout(Some(WRITE_TIMEOUT))?;
    Ok(conn)
}

impl SyncData {
    /// The fenced write of a section, in the separate store.
    fn fenced(&mut self, token: u64, lock: &str, writer: &str) -> Result<i64, LockError> {
        let [value, seen, log] = store_keys(lock);
        let mut conn = sync_conn(&self.store, self.store_conn.take())?;
        let written = fenced_append(&value, &seen, &log, token, writer).invoke(&mut conn);
        if !matches!(written, Err(LockError::Redis(_))) {
            self.store_conn = Some(conn);
        }
        written
    }

    fn write(
        &mut self,
        guard: &blocking::LockGuard,
        lock: &str,
        writer: &str,
    ) -> Result<i64, LockError> {
        let [value, _, log] = store_keys(lock);
        let mut conn = sync_conn(&self.client, self.conn.take())?;
        let written = guarded_append(guard, &value, &log, guard.fencing_token(), writer)
            .delivery(self.delivery)
            .invoke(&mut conn);
        if !matches!(written, Err(LockError::Redis(_))) {
            self.conn = Some(conn);
        }
        written
    }
}

/// The blocking actor (one server only): two threads sharing their own handle, so that
/// they queue locally and hand locks over to each other.
fn blocking_actor(ctx: &Arc<Ctx>, url: &str) -> Vec<std::thread::JoinHandle<()>> {
    let Ok(client) = redis::Client::open(url) else {
        return Vec::new();
    };
    let Ok(locks) = blocking::Locks::connect(&client) else {
        return Vec::new();
    };
    let locks = locks
        .ttl(ctx.ttl())
        .wait_timeout(Duration::from_millis(ctx.cfg.wait_ms))
        .delivery(ctx.delivery());
    let Ok(store) = redis::Client::open(ctx.cfg.store.as_str()) else {
        return Vec::new();
    };
    (0..2u64)
        .map(|thread| {
            let data = SyncData {
                client: client.clone(),
                conn: None,
                store: store.clone(),
                store_conn: None,
                delivery: ctx.delivery(),
            };
            let (ctx, locks) = (Arc::clone(ctx), locks.clone());
            std::thread::spawn(move || blocking_thread(&ctx, &locks, data, thread))
        })
        .collect()
}

/// One thread of the blocking actor.
fn blocking_thread(ctx: &Arc<Ctx>, locks: &blocking::Locks, mut data: SyncData, thread: u64) {
    let mut rng = StdRng::seed_from_u64(ctx.cfg.seed ^ 0x63 ^ (thread << 8));
    ctx.ready_blocking();
    // Watchers still listening after a release (see [`LINGER`]).
    let mut lingering: Vec<std::thread::JoinHandle<()>> = Vec::new();
    while !ctx.stop.load(Ordering::Relaxed) {
        lingering.retain(|w| !w.is_finished());
        let name = pick_name(&mut rng);
        let started = Instant::now();
        let Some(guard) = ctx.locked(&name, started, locks.lock(&name)) else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let lease = guard.lease();
        let grant = ctx.granted(
            &name,
            lease.fencing_token(),
            "blocking",
            lease.valid_until(),
        );
        // 0: held; 1: done; 2: released (`Ok`), listened to for `LINGER` more.
        let state = Arc::new(std::sync::atomic::AtomicU8::new(0));
        let watcher = {
            let (ctx, lease, state) = (Arc::clone(ctx), lease.clone(), Arc::clone(&state));
            std::thread::spawn(move || {
                let lost = || {
                    ctx.record(&Event::Lost {
                        worker: ctx.cfg.worker,
                        grant,
                        t: ctx.now(),
                        valid_until: ctx.rec.ns(lease.valid_until()),
                    });
                };
                while state.load(Ordering::Relaxed) == 0 {
                    if lease.lost_within(Duration::from_millis(20)) {
                        return lost();
                    }
                }
                if state.load(Ordering::Relaxed) == 2 && lease.lost_within(LINGER) {
                    lost();
                }
            })
        };
        let writer = format!("w{}g{grant}", ctx.cfg.worker);
        for i in 0..rng.random_range(1..=3) {
            if i > 0 {
                std::thread::sleep(ctx.pause(&mut rng));
            }
            if !ctx.may_write(grant, || guard.is_lost()) {
                break;
            }
            let t_sent = ctx.now();
            let written = data.write(&guard, &name, &writer);
            ctx.wrote(grant, t_sent, &written, "guarded");
            let t_sent = ctx.now();
            let written = data.fenced(lease.fencing_token(), &name, &writer);
            ctx.wrote(grant, t_sent, &written, "fenced");
        }
        let ending = ctx.releasing(grant);
        let valid_until = lease.valid_until();
        let released = guard.release();
        let outcome = outcome_of(&released);
        ctx.call("release", &name, ending, outcome, String::new());
        ctx.ended(grant, outcome, ending, valid_until);
        state.store(if released.is_ok() { 2 } else { 1 }, Ordering::Relaxed);
        lingering.push(watcher);
    }
    for watcher in lingering {
        let _ = watcher.join();
    }
}

/// Where a worker's critical sections write guarded, by topology.
async fn data(cfg: &WorkerConfig) -> Option<Data> {
    Some(match cfg.topology {
        Topology::Redlock => return None,
        Topology::Single | Topology::Aof => Data::Node(
            redis::Client::open(cfg.urls[0].as_str())
                .expect("the server's url")
                .get_connection_manager()
                .await
                .expect("the server"),
        ),
        Topology::Cluster => Data::Cluster(
            lockscript::ClusterConnection::connect(cfg.urls.clone())
                .await
                .expect("the cluster"),
        ),
    })
}

/// Starts every actor of the worker: its tasks, and the blocking actor's threads.
async fn start_actors(
    ctx: Arc<Ctx>,
) -> (
    Vec<tokio::task::JoinHandle<()>>,
    Vec<std::thread::JoinHandle<()>>,
) {
    let ttl = ctx.ttl();
    let wait = Duration::from_millis(ctx.cfg.wait_ms);
    let delivery = ctx.delivery();
    let urls = ctx.cfg.urls.clone();
    let mut threads = Vec::new();
    let long_seed = ctx.cfg.seed ^ 0xa0;
    let tasks = match ctx.cfg.topology {
        Topology::Single | Topology::Aof => {
            let client = redis::Client::open(urls[0].as_str()).expect("the server's url");
            threads.extend(blocking_actor(&ctx, &urls[0]));
            let make = |ttl| {
                let client = client.clone();
                async move {
                    Locks::connect(&client)
                        .await
                        .expect("connect")
                        .ttl(ttl)
                        .wait_timeout(wait)
                        .delivery(delivery)
                }
            };
            let mut tasks = spawn_actors(&ctx, || make(ttl)).await;
            tasks.extend(one_server_kinds(&ctx, || make(ttl)).await);
            let long = make(LONG_TTL).await;
            tasks.push(tokio::spawn(long_actor(Arc::clone(&ctx), long, long_seed)));
            let pool_client =
                redis::Client::open(ctx.cfg.pool_urls[0].as_str()).expect("the pool's url");
            let pool = RoundRobin::connect(&pool_client, POOL_SIZE)
                .await
                .expect("the pool");
            let pooled = Locks::new(pool)
                .notifications(pool_client)
                .ttl(ttl)
                .wait_timeout(wait)
                .delivery(delivery);
            tasks.extend(pooled_actors(&ctx, &pooled));
            tasks
        }
        Topology::Cluster => {
            let make = |ttl| {
                let urls = urls.clone();
                async move {
                    Locks::connect_cluster(urls)
                        .await
                        .expect("connect_cluster")
                        .ttl(ttl)
                        .wait_timeout(wait)
                        .delivery(delivery)
                }
            };
            let mut tasks = spawn_actors(&ctx, || make(ttl)).await;
            tasks.extend(one_server_kinds(&ctx, || make(ttl)).await);
            let long = make(LONG_TTL).await;
            tasks.push(tokio::spawn(long_actor(Arc::clone(&ctx), long, long_seed)));
            tasks
        }
        Topology::Redlock => {
            let clients: Vec<redis::Client> = urls
                .iter()
                .map(|u| redis::Client::open(u.as_str()).expect("a master's url"))
                .collect();
            let make = |ttl| {
                let clients = clients.clone();
                async move {
                    Redlock::connect(&clients)
                        .await
                        .expect("connect")
                        .ttl(ttl)
                        .wait_timeout(wait)
                        .delivery(delivery)
                }
            };
            let mut tasks = spawn_actors(&ctx, || make(ttl)).await;
            let elect = |name| async move { make(ttl).await.election(name) };
            tasks.extend(election::actors(&ctx, elect).await);
            let long = make(LONG_TTL).await;
            tasks.push(tokio::spawn(long_actor(Arc::clone(&ctx), long, long_seed)));
            let mut pools = Vec::new();
            for url in &ctx.cfg.pool_urls {
                let client = redis::Client::open(url.as_str()).expect("a pool's url");
                pools.push(
                    RoundRobin::connect(&client, POOL_SIZE)
                        .await
                        .expect("a pool"),
                );
            }
            let pooled = Redlock::new(pools)
                .ttl(ttl)
                .wait_timeout(wait)
                .delivery(delivery);
            tasks.extend(pooled_actors(&ctx, &pooled));
            tasks
        }
    };
    (tasks, threads)
}

/// The runtime's threads, by their thread ids (for their scheduler statistics).
static RUNTIME_THREADS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Notes the calling thread as one of the runtime's.
fn runtime_thread_started() {
    if let Ok(me) = std::fs::read_link("/proc/thread-self")
        && let Some(tid) = me.file_name()
    {
        RUNTIME_THREADS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(tid.to_string_lossy().into_owned());
    }
}

/// How long each runtime thread has run and waited for a CPU while runnable, so far
/// (`/proc/self/task/<tid>/schedstat`: nanoseconds on the CPU, then waiting on a run
/// queue).
fn runtime_schedstat() -> Vec<(u64, u64)> {
    let threads = RUNTIME_THREADS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    threads
        .iter()
        .filter_map(|tid| {
            let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
            let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
            Some((fields.next()??, fields.next()??))
        })
        .collect()
}

/// Records this worker kept off the CPU from `from` to `to` (a `worker_stall`, which
/// the checker counts as frozen time); `mode` says how it was seen.
fn record_stall(ctx: &Ctx, from: Instant, to: Instant, mode: &str) {
    ctx.record(&Event::Fault {
        kind: "worker_stall".into(),
        target: format!("worker:{}", ctx.cfg.worker),
        t_start: ctx.rec.ns(from),
        t_end: ctx.rec.ns(to),
        forgets_locks: false,
        forgets_fences: false,
        mode: mode.to_owned(),
        slots: Vec::new(),
    });
}

/// How often the pulse looks at the clock.
const PULSE: Duration = Duration::from_millis(10);

/// A pulse later than this is a stall.
const STALLED: Duration = Duration::from_millis(60);

/// Watches this process's own scheduling, which the nemesis does not see: a thread that
/// wakes every [`PULSE`] records each wake later than [`STALLED`] as a `worker_stall`
/// fault of this worker (the process kept off the CPU, or stopped), which the checker
/// counts as frozen time; and a task on the runtime does the same and prints, for
/// diagnosis, each stall of the runtime the thread did not share (a runtime blocked by
/// the code on it, not by the machine). A Redlock soak (seed 4649) saw every call of one
/// worker held up together for half a second, with no fault on that worker recorded.
fn pulse(ctx: Arc<Ctx>, pulsing: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let stalls = Arc::new(std::sync::Mutex::new(Vec::<(Instant, Instant)>::new()));
    let seen = Arc::clone(&stalls);
    let (on_runtime, running) = (Arc::clone(&ctx), Arc::clone(&pulsing));
    tokio::spawn(async move {
        let mut last = Instant::now();
        let mut sched = runtime_schedstat();
        while running.load(Ordering::Relaxed) {
            tokio::time::sleep(PULSE).await;
            let now = Instant::now();
            let then = std::mem::replace(&mut sched, runtime_schedstat());
            if now - last > STALLED {
                let stall = now - last;
                // How long the runtime's threads ran, and waited for a CPU while they
                // could have run, during the stall: the least wait of them is time the
                // whole runtime was kept off the CPU by the machine.
                let (mut ran, mut least_wait) = (Duration::ZERO, Duration::MAX);
                for ((ran_then, waited_then), (ran_now, waited_now)) in then.iter().zip(&sched) {
                    ran += Duration::from_nanos(ran_now.saturating_sub(*ran_then));
                    let waited = Duration::from_nanos(waited_now.saturating_sub(*waited_then));
                    least_wait = least_wait.min(waited);
                }
                // Give the thread's own record of the same moment time to land.
                tokio::time::sleep(PULSE * 3).await;
                let shared = seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .iter()
                    .any(|&(from, to)| from <= last + PULSE && now <= to + PULSE);
                if !shared && least_wait != Duration::MAX && least_wait + STALLED >= stall {
                    // Every runtime thread waited for a CPU nearly all along: the machine
                    // kept the runtime off it, as a stall the thread shares would say.
                    record_stall(&on_runtime, last, now, "runtime kept off the CPU");
                } else if !shared {
                    eprintln!(
                        "pulse: the runtime stalled {:.1} ms from {} while the process ran \
                         (its threads ran {:.1} ms in all and each waited for a CPU at least \
                         {:.1} ms)",
                        stall.as_secs_f64() * 1e3,
                        on_runtime.rec.ns(last),
                        ran.as_secs_f64() * 1e3,
                        if least_wait == Duration::MAX {
                            0.0
                        } else {
                            least_wait.as_secs_f64() * 1e3
                        },
                    );
                }
            }
            last = Instant::now();
        }
    });
    std::thread::spawn(move || {
        let mut last = Instant::now();
        while pulsing.load(Ordering::Relaxed) {
            std::thread::sleep(PULSE);
            let now = Instant::now();
            if now - last > STALLED {
                stalls
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((last, now));
                record_stall(&ctx, last, now, "");
            }
            last = now;
        }
    })
}

/// Runs a worker process: its actors until `run_for`, then lets them finish their grants
/// and records its end.
///
/// # Panics
///
/// If the store or the lock servers cannot be reached at start.
pub fn run(cfg: WorkerConfig) {
    if cfg.mutant.as_deref() == Some("no-deadline") {
        lockscript::__private::mutants::set_no_deadline(true);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(runtime_thread_started)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let rec = Recorder::create(&cfg.out, cfg.worker);
    rec.record(&Event::Start {
        worker: cfg.worker,
        pid: std::process::id(),
        t: rec.ns(Instant::now()),
    });
    runtime.block_on(async move {
        let data = data(&cfg).await;
        let store = redis::Client::open(cfg.store.as_str())
            .expect("the store's url")
            .get_multiplexed_async_connection()
            .await
            .expect("the store");
        let (go, ready) = tokio::sync::watch::channel(false);
        let ctx = Arc::new(Ctx {
            rec,
            cfg,
            grants: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            data,
            store,
            ready,
        });
        let pulsing = Arc::new(AtomicBool::new(true));
        let pulse = pulse(Arc::clone(&ctx), Arc::clone(&pulsing));
        let (tasks, threads) = start_actors(Arc::clone(&ctx)).await;
        let _ = go.send(true);
        tokio::time::sleep(Duration::from_millis(ctx.cfg.run_for_ms)).await;
        ctx.stop.store(true, Ordering::Relaxed);
        for task in tasks {
            let _ = task.await;
        }
        let ctx2 = Arc::clone(&ctx);
        tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
            drop(ctx2);
        })
        .await
        .expect("the blocking actor");
        // Background releases of dropped guards get a moment to land, and the last
        // releases' watchers listen out their `LINGER`.
        tokio::time::sleep(LINGER + Duration::from_millis(50)).await;
        pulsing.store(false, Ordering::Relaxed);
        let _ = tokio::task::spawn_blocking(move || pulse.join()).await;
        ctx.record(&Event::End {
            worker: ctx.cfg.worker,
            t: ctx.now(),
        });
    });
}
