//! The connection kinds the lock cycle is measured on, each against its own floors: a
//! plain sync `redis::Connection` on the main thread, and a `MultiplexedConnection` on
//! a current-thread and on a multi-thread tokio runtime (driven from the main thread, or
//! from a task on a worker).
//!
//! Every kind runs in each round: the `PING` round trip, then, interleaved in blocks (see
//! [`Interleaved`]), the `SET` floor, the script floor and the face's `try_lock` +
//! `release` (watchdog on, the default). The floors use the plain redis crate on a connection of the same kind as
//! the face's, with a key and a token of the face's sizes, so the script floor sends the
//! server the same bytes as the face and the server does the same work.

use std::cell::RefCell;
use std::future::Future;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use lockscript::builtin::{acquire, compare_del};
use lockscript::{Delivery, Locks, blocking};
use redis::aio::MultiplexedConnection;
use tokio::runtime::Runtime;

use crate::BoxError;
use crate::measure::{Interleaved, Samples, percentile};

/// The face's lock name; its key is `lock:{bench:face}`.
const FACE_LOCK: &str = "bench:face";
/// The floors' key and fencing counter, as long as the face's.
const FLOOR_KEY: &str = "lock:{bench:base}";
const FLOOR_FENCE: &str = "lock:{bench:base}:fence";
const FLOOR_HOLDERS: &str = "lock:{bench:base}:holders";
/// The floors' owner token: 32 hex digits, like the face's.
const FLOOR_TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// The scripts' digests, read once: the floor's loop must not pay for building an
/// `Invocation` per cycle just to learn them.
static ACQUIRE_SHA: LazyLock<&str> =
    LazyLock::new(|| acquire("k", "f", "h", "t", 1, 1).script().sha1());
static COMPARE_DEL_SHA: LazyLock<&str> = LazyLock::new(|| compare_del("k", "t").script().sha1());
/// Their functions in the binary's library (`Delivery::Functions`).
static ACQUIRE_FN: LazyLock<&str> = LazyLock::new(|| function_of(*ACQUIRE_SHA));
static COMPARE_DEL_FN: LazyLock<&str> = LazyLock::new(|| function_of(*COMPARE_DEL_SHA));

fn function_of(sha1: &str) -> &'static str {
    &lockscript::functions_library()
        .function(sha1)
        .expect("every registered script has a function")
        .function
}

/// How a raw floor cycle takes its lock; it frees it with `EVALSHA` compare-del.lua.
#[derive(Clone, Copy)]
pub enum Take {
    /// `SET NX PX`: the physical floor.
    Set,
    /// `EVALSHA` acquire-with-retry.lua, the script the face runs (`SET NX PX` and the
    /// fencing `INCR` in one atomic call): the face's server work, without its client.
    Script,
    /// The same scripts as Redis Functions: `FCALL` of their functions.
    Fcall,
}

impl Take {
    /// The throughput's floors.
    pub const BOTH: [Take; 2] = [Take::Set, Take::Script];
    /// The cycle's floors.
    pub const ALL: [Take; 3] = [Take::Set, Take::Script, Take::Fcall];

    /// The figures' stem after the kind: `floor_set`, `floor_script`.
    pub fn stem(self) -> &'static str {
        match self {
            Take::Set => "floor_set",
            Take::Script => "floor_script",
            Take::Fcall => "floor_fcall",
        }
    }

    /// The command that takes lock `key` (fencing counter `fence`, shared holders
    /// `holders`, which the script only reads).
    fn cmd(self, key: &str, fence: &str, holders: &str) -> redis::Cmd {
        match self {
            Take::Set => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(key)
                    .arg(FLOOR_TOKEN)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000);
                cmd
            }
            Take::Script | Take::Fcall => {
                let mut cmd = match self {
                    Take::Fcall => redis::cmd("FCALL"),
                    _ => redis::cmd("EVALSHA"),
                };
                cmd.arg(if matches!(self, Take::Fcall) {
                    *ACQUIRE_FN
                } else {
                    *ACQUIRE_SHA
                })
                .arg(3)
                .arg(key)
                .arg(fence)
                .arg(holders)
                .arg(FLOOR_TOKEN)
                .arg(30_000)
                .arg(3_630_000);
                cmd
            }
        }
    }

    /// Whether `reply` to [`cmd`](Self::cmd) granted the lock: `OK`, or `{1, fence}`.
    fn granted(self, reply: &redis::Value) -> bool {
        match (self, reply) {
            (Take::Set, redis::Value::Okay) => true,
            (Take::Script | Take::Fcall, redis::Value::Array(items)) => {
                items.first() == Some(&redis::Value::Int(1))
            }
            _ => false,
        }
    }
}

/// compare-del.lua for the floor's token on `key`: `FCALL` of its function after a
/// [`Take::Fcall`], else `EVALSHA`.
fn free_cmd(key: &str, take: Take) -> redis::Cmd {
    let mut cmd;
    if matches!(take, Take::Fcall) {
        cmd = redis::cmd("FCALL");
        cmd.arg(*COMPARE_DEL_FN);
    } else {
        cmd = redis::cmd("EVALSHA");
        cmd.arg(*COMPARE_DEL_SHA);
    }
    cmd.arg(1).arg(key).arg(FLOOR_TOKEN);
    cmd
}

/// A raw cycle with the plain redis crate on an async connection: take `key` as `take`
/// says, then free it with compare-del.
pub async fn floor_cycle(
    conn: &mut MultiplexedConnection,
    key: &str,
    fence: &str,
    holders: &str,
    take: Take,
) -> Result<(), BoxError> {
    let reply: redis::Value = take.cmd(key, fence, holders).query_async(conn).await?;
    if !take.granted(&reply) {
        return Err(format!("the floor's key was not free: {reply:?}").into());
    }
    let deleted: i64 = free_cmd(key, take).query_async(conn).await?;
    if deleted != 1 {
        return Err("the floor's compare-del found another token".into());
    }
    Ok(())
}

/// The same on a sync connection.
fn sync_floor_cycle(conn: &mut redis::Connection, take: Take) -> Result<(), BoxError> {
    let reply: redis::Value = take
        .cmd(FLOOR_KEY, FLOOR_FENCE, FLOOR_HOLDERS)
        .query(conn)?;
    if !take.granted(&reply) {
        return Err(format!("the floor's key was not free: {reply:?}").into());
    }
    let deleted: i64 = free_cmd(FLOOR_KEY, take).query(conn)?;
    if deleted != 1 {
        return Err("the floor's compare-del found another token".into());
    }
    Ok(())
}

/// `n` cycles of the blocking face: `try_lock` + `release` of its lock.
fn sync_face_cycles(locks: &blocking::Locks, n: usize) -> Result<(), BoxError> {
    for _ in 0..n {
        let guard = locks
            .try_lock(FACE_LOCK)?
            .ok_or("the face's lock was free")?;
        guard.release()?;
    }
    Ok(())
}

/// `n` cycles of the async face: `try_lock` + `release` of its lock.
async fn face_cycles(locks: Locks<MultiplexedConnection>, n: usize) -> Result<(), BoxError> {
    for _ in 0..n {
        let guard = locks
            .try_lock(FACE_LOCK)
            .await?
            .ok_or("the face's lock was free")?;
        guard.release().await?;
    }
    Ok(())
}

/// The sync kind: plain `redis::Connection`s, used on the main thread outside any
/// runtime.
pub struct SyncKind {
    /// The floors' and the `PING`s' connection.
    conn: redis::Connection,
    /// `blocking::Locks::new(client.get_connection())`: exactly a plain connection.
    face: blocking::Locks,
    /// `blocking::Locks::connect(client)`: the same with socket read and write timeouts
    /// (set once) and re-opened when it breaks.
    connected: blocking::Locks,
    /// `face` with `Delivery::Functions`.
    functions: blocking::Locks,
    /// A Prometheus recorder, installed on this thread only while the `_metrics`
    /// contender runs: what lockscript's `metrics` feature costs with a recorder.
    recorder: metrics_exporter_prometheus::PrometheusRecorder,
}

impl SyncKind {
    pub fn new(client: &redis::Client) -> Result<Self, BoxError> {
        Ok(Self {
            conn: client.get_connection()?,
            face: blocking::Locks::new(client.get_connection()?),
            connected: blocking::Locks::connect(client)?,
            functions: blocking::Locks::new(client.get_connection()?).delivery(Delivery::Functions),
            recorder: metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
        })
    }

    /// One round of `n` cycles per contender: `PING`, the floors, the face made with
    /// `new`, the face made with `connect`.
    pub fn round(&mut self, n: usize, samples: &mut Samples) -> Result<(), BoxError> {
        let mut rtts = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let _: String = redis::cmd("PING").query(&mut self.conn)?;
            rtts.push(t.elapsed().as_secs_f64() * 1e6);
        }
        rtts.sort_by(f64::total_cmp);
        samples.push("sync_rtt_p50_us", percentile(&rtts, 0.5));
        let conn = RefCell::new(&mut self.conn);
        let mut contenders = Interleaved::new();
        for take in Take::ALL {
            let conn = &conn;
            contenders.add(
                format!("sync_{}", take.stem()),
                Box::new(move |n| {
                    let mut conn = conn.borrow_mut();
                    (0..n).try_for_each(|_| sync_floor_cycle(&mut conn, take))
                }),
            );
        }
        for (stem, locks) in [
            ("sync", &self.face),
            ("sync_connect", &self.connected),
            ("sync_functions", &self.functions),
        ] {
            contenders.add(stem, Box::new(move |n| sync_face_cycles(locks, n)));
        }
        // The face again with a recorder taking every figure of the `metrics` feature.
        let (face, recorder) = (&self.face, &self.recorder);
        contenders.add(
            "sync_metrics",
            Box::new(move |n| metrics::with_local_recorder(recorder, || sync_face_cycles(face, n))),
        );
        contenders.round(n, samples)
    }
}

/// An async kind: a `MultiplexedConnection` made on `runtime` (its driver task runs
/// there), the floors on clones of it, and `Locks::new` on another clone.
pub struct AsyncKind<'rt> {
    /// The figures' prefix: `ct`, `mt`, `mtw`.
    name: &'static str,
    runtime: &'rt Runtime,
    /// Run each contender as a task on a worker of a multi-thread runtime (where a
    /// service's request handlers run) rather than in `block_on` on the main thread.
    on_worker: bool,
    pub conn: MultiplexedConnection,
    pub face: Locks<MultiplexedConnection>,
    /// `face` with `Delivery::Functions`.
    functions: Locks<MultiplexedConnection>,
    /// A Prometheus recorder for the `_metrics` contender (see [`SyncKind`]); installed on
    /// the main thread, so only kinds that run the face there (not `on_worker`) use it.
    recorder: metrics_exporter_prometheus::PrometheusRecorder,
}

impl<'rt> AsyncKind<'rt> {
    /// `on_worker`: see the field.
    pub fn new(
        name: &'static str,
        runtime: &'rt Runtime,
        on_worker: bool,
        client: &redis::Client,
    ) -> Result<Self, BoxError> {
        let conn = runtime.block_on(client.get_multiplexed_async_connection())?;
        Ok(Self {
            name,
            runtime,
            on_worker,
            face: Locks::new(conn.clone()),
            functions: Locks::new(conn.clone()).delivery(Delivery::Functions),
            recorder: metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
            conn,
        })
    }

    /// Runs `contender` on this kind's runtime, to its end.
    pub fn run<T: Send + 'static>(
        &self,
        contender: impl Future<Output = Result<T, BoxError>> + Send + 'static,
    ) -> Result<T, BoxError> {
        if self.on_worker {
            self.runtime
                .block_on(async move { tokio::spawn(contender).await? })
        } else {
            self.runtime.block_on(contender)
        }
    }

    /// The median `PING` round trip over `n` pings, each sent `idle` after the last reply
    /// (zero: back to back). After an idle millisecond the machine has to wake up (on
    /// this VM that costs more than the round trip itself), which is what a handoff after
    /// 1 ms of held work pays.
    pub fn rtt_p50_us(&self, n: usize, idle: Duration) -> Result<f64, BoxError> {
        let mut conn = self.conn.clone();
        self.run(async move {
            let mut samples = Vec::with_capacity(n);
            for _ in 0..n {
                if !idle.is_zero() {
                    tokio::time::sleep(idle).await;
                }
                let t = Instant::now();
                let _: String = redis::cmd("PING").query_async(&mut conn).await?;
                samples.push(t.elapsed().as_secs_f64() * 1e6);
            }
            samples.sort_by(f64::total_cmp);
            Ok(percentile(&samples, 0.5))
        })
    }

    /// One round of `n` cycles per contender: `PING`, the floors, the face.
    pub fn round(&self, n: usize, samples: &mut Samples) -> Result<(), BoxError> {
        let name = self.name;
        samples.push(
            format!("{name}_rtt_p50_us"),
            self.rtt_p50_us(n, Duration::ZERO)?,
        );
        let mut contenders = Interleaved::new();
        for take in Take::ALL {
            let conn = self.conn.clone();
            contenders.add(
                format!("{name}_{}", take.stem()),
                Box::new(move |n| {
                    let mut conn = conn.clone();
                    self.run(async move {
                        for _ in 0..n {
                            floor_cycle(&mut conn, FLOOR_KEY, FLOOR_FENCE, FLOOR_HOLDERS, take)
                                .await?;
                        }
                        Ok(())
                    })
                }),
            );
        }
        for (stem, locks) in [
            (name.to_owned(), self.face.clone()),
            (format!("{name}_functions"), self.functions.clone()),
        ] {
            contenders.add(
                stem,
                Box::new(move |n| self.run(face_cycles(locks.clone(), n))),
            );
        }
        if !self.on_worker {
            let locks = self.face.clone();
            contenders.add(
                format!("{name}_metrics"),
                Box::new(move |n| {
                    let locks = locks.clone();
                    metrics::with_local_recorder(&self.recorder, || self.run(face_cycles(locks, n)))
                }),
            );
        }
        contenders.round(n, samples)
    }
}
