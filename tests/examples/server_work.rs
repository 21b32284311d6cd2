//! The server's side of a lock: server CPU per lock cycle, per renewal and per release on
//! the script path and on the native path (the acquire transaction; `SET … IFEQ`,
//! `DELIFEQ`: Valkey 9.1), next to the SET floor, the peers' cycle (`SET NX PX` and
//! compare-and-delete as `EVALSHA`, no fencing token) and ours before the acquire
//! transaction (acquire-with-retry.lua), measured in one interleaved run, one call at a time and under load (64
//! tasks cycling at once on distinct keys); then what keeping 1,000 and 10,000
//! leases (ttl 1 s, watchdog on) renewed for 10 s costs on each path: server cores,
//! client cores, round trips per second (the handle's own, a pipeline counting once) and
//! leases lost, next to a floor: the same number of native renewals sent by hand in
//! pipelines of the same size at the same pace (`SET … IFEQ … PX`), server cores.
//!
//! ```text
//! export REDIS_SERVER_BIN=$(bash tests/lockscript-test/servers.sh valkey-9.1)
//! cargo run --release -p lockscript-harness --example server_work [-- --quick]
//! ```
//!
//! Server CPU is the server's own count (`INFO cpu`, user + system) before and after a
//! run of calls, over the calls; on a server without the native commands both paths are
//! the scripts. Figures go to stdout and to `target/bench/server-work.json`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lockscript::Locks;
use lockscript_test::server::RedisServer;
use redis::aio::MultiplexedConnection;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A named figure's samples, one per round.
#[derive(Default)]
struct Samples(BTreeMap<String, Vec<f64>>);

impl Samples {
    fn push(&mut self, name: &str, value: f64) {
        self.0.entry(name.to_owned()).or_default().push(value);
    }

    fn medians(&self) -> BTreeMap<String, f64> {
        self.0
            .iter()
            .map(|(k, v)| {
                let mut v = v.clone();
                v.sort_by(f64::total_cmp);
                (k.clone(), v[v.len() / 2])
            })
            .collect()
    }
}

/// A field of `INFO section`, summed over the names given.
async fn info(
    conn: &mut MultiplexedConnection,
    section: &str,
    fields: &[&str],
) -> Result<f64, BoxError> {
    let text: String = redis::cmd("INFO").arg(section).query_async(conn).await?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            fields
                .contains(&k)
                .then(|| v.trim().parse::<f64>().ok())
                .flatten()
        })
        .sum())
}

async fn server_cpu_s(conn: &mut MultiplexedConnection) -> Result<f64, BoxError> {
    info(conn, "cpu", &["used_cpu_sys", "used_cpu_user"]).await
}

/// This process's CPU time (every thread), in seconds.
fn client_cpu_s() -> Result<f64, BoxError> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task")? {
        let Ok(stat) = std::fs::read_to_string(task?.path().join("schedstat")) else {
            continue;
        };
        total += stat
            .split_whitespace()
            .next()
            .unwrap_or("0")
            .parse::<u64>()?;
    }
    #[allow(clippy::cast_precision_loss)]
    Ok(total as f64 / 1e9)
}

/// The microseconds the server spent executing `commands` (`INFO commandstats`, each
/// command's `usec`, a script's including the commands it calls).
async fn exec_us(conn: &mut MultiplexedConnection, commands: &[&str]) -> Result<f64, BoxError> {
    Ok(summed(&all_stats(conn).await?, commands).1)
}

/// `(calls, usec)` of [`all_stats`], summed over `commands`.
fn summed(stats: &BTreeMap<String, (f64, f64)>, commands: &[&str]) -> (f64, f64) {
    (commands.iter())
        .filter_map(|c| stats.get(*c))
        .fold((0.0, 0.0), |(calls, usec), (c, u)| (calls + c, usec + u))
}

/// Every command's `(calls, usec)` in `INFO commandstats`.
async fn all_stats(
    conn: &mut MultiplexedConnection,
) -> Result<BTreeMap<String, (f64, f64)>, BoxError> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let field = |fields: &str, name: &str| {
        fields.split(',').find_map(|f| {
            let value = f.strip_prefix(name)?.strip_prefix('=')?;
            value.parse::<f64>().ok()
        })
    };
    Ok(text
        .lines()
        .filter_map(|l| {
            let (name, fields) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let stat = (field(fields, "calls")?, field(fields, "usec")?);
            Some((name.to_owned(), stat))
        })
        .collect())
}

/// Where a cycle's execution goes: per command, the microseconds it executed per cycle
/// between two [`all_stats`] (`n` cycles), into `samples` as `{who}_cmd_{command}_us`
/// (and its calls per cycle as `…_calls`). A command inside `MULTI`/`EXEC` or a script
/// is counted in its own line too (and in `exec`'s or the script's).
fn breakdown(
    samples: &mut Samples,
    who: &str,
    before: &BTreeMap<String, (f64, f64)>,
    after: &BTreeMap<String, (f64, f64)>,
    n: usize,
) {
    #[allow(clippy::cast_precision_loss)]
    let n = n as f64;
    for (name, &(calls, usec)) in after {
        let (calls0, usec0) = before.get(name).copied().unwrap_or_default();
        // The stats connection's own `INFO` calls are not the cycle's.
        if calls > calls0 && name != "info" {
            samples.push(&format!("{who}_cmd_{name}_us"), (usec - usec0) / n);
            samples.push(&format!("{who}_cmd_{name}_calls"), (calls - calls0) / n);
        }
    }
}

/// Per call of the `n` calls `calls` makes: the server's CPU microseconds (`INFO cpu`,
/// its reading and writing included) and its microseconds executing `commands`.
async fn server_us_per<F>(
    stats: &mut MultiplexedConnection,
    n: usize,
    commands: &[&str],
    calls: F,
) -> Result<(f64, f64), BoxError>
where
    F: Future<Output = Result<(), BoxError>>,
{
    let (cpu0, exec0) = (server_cpu_s(stats).await?, exec_us(stats, commands).await?);
    calls.await?;
    let (cpu1, exec1) = (server_cpu_s(stats).await?, exec_us(stats, commands).await?);
    #[allow(clippy::cast_precision_loss)]
    let n = n as f64;
    Ok(((cpu1 - cpu0) * 1e6 / n, (exec1 - exec0) / n))
}

/// The commands a path sends itself in each measured run (a script's inner commands are
/// in its own time): (cycle, renewal, release).
fn top_level(path: &str) -> [&'static [&'static str]; 3] {
    const SCRIPTS: &[&str] = &["evalsha", "eval"];
    if path == "native" {
        [
            // The acquire transaction (EXEC's time includes its commands'), the clock
            // question of a new connection, the release.
            &[
                "multi", "exec", "time", "evalsha", "eval", "delifeq", "delex", "publish",
            ],
            // A server without the native commands gets the scripts on this path too.
            &["set", "evalsha", "eval"],
            &["delifeq", "delex", "publish", "evalsha", "eval"],
        ]
    } else {
        [SCRIPTS, SCRIPTS, SCRIPTS]
    }
}

fn push(samples: &mut Samples, path: &str, what: &str, (cpu, exec): (f64, f64)) {
    samples.push(&format!("{path}_{what}_server_us"), cpu);
    samples.push(&format!("{path}_{what}_exec_us"), exec);
}

/// One round of each path's cycle, renewal and release, and the floor, into `samples`.
async fn round(
    paths: &[(&str, &Locks<MultiplexedConnection>)],
    floor: &mut MultiplexedConnection,
    stats: &mut MultiplexedConnection,
    n: usize,
    samples: &mut Samples,
) -> Result<(), BoxError> {
    for &(path, locks) in paths {
        let [cycle_cmds, renewal_cmds, release_cmds] = top_level(path);
        let before = all_stats(stats).await?;
        let cycle = server_us_per(
            stats,
            n,
            cycle_cmds,
            Box::pin(async {
                for _ in 0..n {
                    let guard = locks.try_lock("work:cycle").await?.ok_or("held")?;
                    guard.release().await?;
                }
                Ok(())
            }),
        )
        .await?;
        push(samples, path, "cycle", cycle);
        let after = all_stats(stats).await?;
        breakdown(samples, path, &before, &after, n);

        let guard = locks.try_lock("work:renew").await?.ok_or("held")?;
        let renewal = server_us_per(stats, n, renewal_cmds, async {
            for _ in 0..n {
                guard.extend(Duration::from_secs(30)).await?;
            }
            Ok(())
        })
        .await?;
        guard.release().await?;
        push(samples, path, "renewal", renewal);

        let mut held = Vec::with_capacity(n);
        for i in 0..n {
            held.push(
                locks
                    .try_lock(&format!("work:release:{i}"))
                    .await?
                    .ok_or("held")?,
            );
        }
        let release = server_us_per(stats, n, release_cmds, async {
            for guard in held {
                guard.release().await?;
            }
            Ok(())
        })
        .await?;
        push(samples, path, "release", release);
    }
    for (name, cycle) in BY_HAND {
        let (cmds, native) = (
            by_hand_commands(name),
            paths[0].1.offered_commands().unwrap_or_default(),
        );
        let before = all_stats(stats).await?;
        let figure = server_us_per(stats, n, cmds, async {
            for _ in 0..n {
                cycle(floor.clone(), "work:hand".to_owned(), native).await?;
            }
            Ok(())
        })
        .await?;
        push(samples, name, "cycle", figure);
        let after = all_stats(stats).await?;
        breakdown(samples, name, &before, &after, n);
    }
    let set_floor = server_us_per(stats, n, &["set", "del"], async {
        for _ in 0..n {
            let _: Option<String> = set_nx_px("work:floor").query_async(floor).await?;
            let _: i64 = redis::cmd("DEL")
                .arg("work:floor")
                .query_async(floor)
                .await?;
        }
        Ok(())
    })
    .await?;
    push(samples, "set_floor", "cycle", set_floor);
    loaded(paths, floor, stats, n, samples).await
}

/// One lock cycle sent by hand on a connection, for key `key`, with what the server
/// offers.
type HandCycle = fn(MultiplexedConnection, String, lockscript::NativeCommands) -> HandRun;

/// One by-hand cycle on its way.
type HandRun = std::pin::Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;

/// The cycles sent by hand, the floors ours is compared with: the peers' (redsync,
/// redis-py, rslock: `SET NX PX`, then compare-and-delete as `EVALSHA`, no fencing
/// token) and ours before the acquire transaction (acquire-with-retry.lua, then the
/// release as the handle sends it: `DELIFEQ` + `PUBLISH` where offered, compare-del.lua
/// elsewhere).
const BY_HAND: [(&str, HandCycle); 2] = [("peers", peers_cycle), ("before", before_cycle)];

/// The commands each by-hand cycle sends itself.
fn by_hand_commands(name: &str) -> &'static [&'static str] {
    if name == "peers" {
        &["set", "evalsha", "eval"]
    } else {
        &["evalsha", "eval", "delifeq", "delex", "publish"]
    }
}

/// The grant every floor and the peers' cycle sends: `SET key token NX PX 30000`.
fn set_nx_px(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg("token").arg("NX").arg("PX").arg(30_000);
    cmd
}

fn peers_cycle(
    mut conn: MultiplexedConnection,
    key: String,
    _: lockscript::NativeCommands,
) -> HandRun {
    Box::pin(async move {
        let lock = format!("{{{key}}}:lock");
        let _: Option<String> = set_nx_px(&lock).query_async(&mut conn).await?;
        let _ = lockscript::builtin::compare_del(&lock, "token")
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    })
}

fn before_cycle(
    mut conn: MultiplexedConnection,
    key: String,
    native: lockscript::NativeCommands,
) -> HandRun {
    Box::pin(async move {
        let (lock, fence) = (format!("lock:{{{key}}}"), format!("lock:{{{key}}}:fence"));
        let holders = format!("lock:{{{key}}}:holders");
        let _ = lockscript::builtin::acquire(&lock, &fence, &holders, "token", 30_000, 3_630_000)
            .invoke_async(&mut conn)
            .await?;
        if native.delifeq {
            let mut pipe = redis::pipe();
            pipe.cmd("DELIFEQ").arg(&lock).arg("token");
            pipe.cmd("PUBLISH").arg(format!("{lock}:released")).arg("");
            let _: (i64, i64) = pipe.query_async(&mut conn).await?;
        } else {
            let _ = lockscript::builtin::compare_del(&lock, "token")
                .invoke_async(&mut conn)
                .await?;
        }
        Ok(())
    })
}

/// Tasks cycling at once on distinct keys through one handle, so the server reads and
/// writes many calls per wake-up (as under a throughput load) and its CPU per cycle is
/// mostly the commands'.
const TASKS: usize = 64;

/// The cycle under load: [`TASKS`] tasks on distinct keys, `n` cycles in all, each path
/// and the `SET` floor (over one multiplexed connection) in turn.
async fn loaded(
    paths: &[(&str, &Locks<MultiplexedConnection>)],
    floor: &MultiplexedConnection,
    stats: &mut MultiplexedConnection,
    n: usize,
    samples: &mut Samples,
) -> Result<(), BoxError> {
    let each = n / TASKS;
    for &(path, locks) in paths {
        let [cycle_cmds, _, _] = top_level(path);
        let run = async {
            let mut tasks = tokio::task::JoinSet::new();
            for t in 0..TASKS {
                let locks = locks.clone();
                tasks.spawn(async move {
                    let name = format!("work:loaded:{t}");
                    for _ in 0..each {
                        let guard = locks.try_lock(&name).await?.ok_or("held")?;
                        guard.release().await?;
                    }
                    Ok::<_, BoxError>(())
                });
            }
            while let Some(done) = tasks.join_next().await {
                done??;
            }
            Ok(())
        };
        let cycle = server_us_per(stats, each * TASKS, cycle_cmds, Box::pin(run)).await?;
        push(samples, path, "loaded_cycle", cycle);
    }
    let native = paths
        .first()
        .and_then(|(_, l)| l.offered_commands())
        .unwrap_or_default();
    for (name, cycle) in BY_HAND {
        let run = async {
            let mut tasks = tokio::task::JoinSet::new();
            for t in 0..TASKS {
                let conn = floor.clone();
                tasks.spawn(async move {
                    for _ in 0..each {
                        cycle(conn.clone(), format!("work:loaded-hand:{t}"), native).await?;
                    }
                    Ok::<_, BoxError>(())
                });
            }
            while let Some(done) = tasks.join_next().await {
                done??;
            }
            Ok(())
        };
        let figure =
            server_us_per(stats, each * TASKS, by_hand_commands(name), Box::pin(run)).await?;
        push(samples, name, "loaded_cycle", figure);
    }
    let run = async {
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..TASKS {
            let mut conn = floor.clone();
            tasks.spawn(async move {
                let key = format!("work:loaded-floor:{t}");
                for _ in 0..each {
                    let _: Option<String> = set_nx_px(&key).query_async(&mut conn).await?;
                    let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
                }
                Ok::<_, BoxError>(())
            });
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        Ok(())
    };
    let cycle = server_us_per(stats, each * TASKS, &["set", "del"], Box::pin(run)).await?;
    push(samples, "set_floor", "loaded_cycle", cycle);
    Ok(())
}

/// The handle's connection, counting its round trips (a pipeline is one).
#[derive(Clone)]
struct Counted {
    conn: MultiplexedConnection,
    trips: Arc<AtomicU64>,
}

impl redis::aio::ConnectionLike for Counted {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        self.trips.fetch_add(1, Ordering::Relaxed);
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        self.trips.fetch_add(1, Ordering::Relaxed);
        self.conn.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

/// `n` leases of `path` held for `hold` with a 1 s ttl: server cores, client cores,
/// round trips per second (the handle's), leases lost, and the floor: server and client
/// cores for the same renewals sent by hand as `SET … IFEQ … PX` in pipelines of the
/// same size at the same pace, after the leases are released.
async fn leases(
    client: &redis::Client,
    stats: &mut MultiplexedConnection,
    native: bool,
    n: usize,
    held_for: Duration,
) -> Result<[f64; 6], BoxError> {
    let trips = Arc::new(AtomicU64::new(0));
    let conn = Counted {
        conn: client.get_multiplexed_async_connection().await?,
        trips: Arc::clone(&trips),
    };
    let locks = Locks::new(conn)
        .ttl(Duration::from_secs(1))
        .native_commands(native);
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        held.push(
            locks
                .try_lock(&format!("work:lease:{i}"))
                .await?
                .ok_or("held")?,
        );
    }
    let renewals = |s: &mut MultiplexedConnection| {
        let mut s = s.clone();
        let renewal = if native { "set" } else { "evalsha" };
        async move { Ok::<_, BoxError>(summed(&all_stats(&mut s).await?, &[renewal]).0) }
    };
    let (server0, client0, trips0, renewed0) = (
        server_cpu_s(stats).await?,
        client_cpu_s()?,
        trips.load(Ordering::Relaxed),
        renewals(stats).await?,
    );
    tokio::time::sleep(held_for).await;
    let (server1, client1, trips1, renewed1) = (
        server_cpu_s(stats).await?,
        client_cpu_s()?,
        trips.load(Ordering::Relaxed),
        renewals(stats).await?,
    );
    let secs = held_for.as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let lost = held.iter().filter(|g| g.is_lost()).count() as f64;
    #[allow(clippy::cast_precision_loss)]
    let trips = (trips1 - trips0) as f64;
    // The floor: the same renewals by hand, native, in pipelines of the same size, at
    // the same pace, on the leases' own keys.
    let batch = ((renewed1 - renewed0) / trips.max(1.0)).round().max(1.0);
    let tokens: Vec<(String, String)> = (0..n)
        .map(|i| (format!("lock:{{work:lease:{i}}}"), format!("floor-{i}")))
        .collect();
    for guard in held {
        let _ = guard.release().await;
    }
    let [floor_server, floor_client] =
        by_hand(client, stats, &tokens, batch, trips, held_for).await?;
    Ok([
        (server1 - server0) / secs,
        (client1 - client0) / secs,
        trips / secs,
        lost,
        floor_server,
        floor_client,
    ])
}

/// Server cores and client cores for `trips` pipelines of `batch` native renewals
/// (`SET key token IFEQ token PX 1000` over `keys` in turn) sent evenly over `span`:
/// the floor of native renewal round trips of that size.
async fn by_hand(
    client: &redis::Client,
    stats: &mut MultiplexedConnection,
    keys: &[(String, String)],
    batch: f64,
    trips: f64,
    span: Duration,
) -> Result<[f64; 2], BoxError> {
    let mut conn = client.get_multiplexed_async_connection().await?;
    // Keys of their own, set once: the floor renews keys that exist and are its own.
    let mut pipe = redis::pipe();
    for (key, token) in keys {
        pipe.cmd("SET")
            .arg(format!("floor:{key}"))
            .arg(token)
            .arg("PX")
            .arg(60_000)
            .ignore();
    }
    pipe.query_async::<()>(&mut conn).await?;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let (batch, trips) = (batch as usize, trips as u32);
    let every = span / trips.max(1);
    let (server0, client0) = (server_cpu_s(stats).await?, client_cpu_s()?);
    let mut next = tokio::time::Instant::now();
    let mut at = 0;
    for _ in 0..trips {
        let mut pipe = redis::pipe();
        for _ in 0..batch {
            let (key, token) = &keys[at % keys.len()];
            at += 1;
            pipe.cmd("SET")
                .arg(format!("floor:{key}"))
                .arg(token)
                .arg("IFEQ")
                .arg(token);
            pipe.arg("PX").arg(1_000).ignore();
        }
        pipe.query_async::<()>(&mut conn).await?;
        next += every;
        tokio::time::sleep_until(next).await;
    }
    let (server1, client1) = (server_cpu_s(stats).await?, client_cpu_s()?);
    let secs = span.as_secs_f64();
    Ok([(server1 - server0) / secs, (client1 - client0) / secs])
}

/// What the server was found to offer, once the question a lease call asked is answered:
/// it goes beside the call, bounded on its own, so its answer may come just after the
/// call's (the leases are not measured without one; before this wait a run could skip
/// them on a server that offers the native commands).
async fn offered(locks: &Locks<MultiplexedConnection>) -> Option<lockscript::NativeCommands> {
    let asked = tokio::time::Instant::now();
    while locks.offered_commands().is_none() && asked.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    locks.offered_commands()
}

fn main() -> Result<(), BoxError> {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, n, hold) = if quick {
        (3, 2_000, Duration::from_secs(3))
    } else {
        (7, 10_000, Duration::from_secs(10))
    };
    let server = RedisServer::start();
    let client = server.client();
    lockscript::load_scripts(&mut client.get_connection()?)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if std::env::args().any(|a| a == "--hold-only") {
        // For a profiler: only 10,000 native leases held, nothing else.
        return runtime.block_on(async {
            let mut stats = client.get_multiplexed_async_connection().await?;
            let [server, client_cores, trips, lost, ..] =
                leases(&client, &mut stats, true, 10_000, hold).await?;
            println!("server {server:.3} client {client_cores:.3} trips/s {trips:.0} lost {lost}");
            Ok(())
        });
    }
    let mut figures = runtime.block_on(async {
        let connect = || client.get_multiplexed_async_connection();
        let native = Locks::new(connect().await?).native_commands(true);
        let script = Locks::new(connect().await?).native_commands(false);
        let (mut floor, mut stats) = (connect().await?, connect().await?);
        // Ask the server once, outside the measured calls.
        native
            .try_lock("work:warm")
            .await?
            .ok_or("held")?
            .release()
            .await?;
        let found = offered(&native).await;
        eprintln!("server offers: {found:?}");
        let mut samples = Samples::default();
        for r in 0..rounds {
            eprint!("\rround {}/{rounds}", r + 1);
            let paths = [("native", &native), ("script", &script)];
            Box::pin(round(&paths, &mut floor, &mut stats, n, &mut samples)).await?;
        }
        eprintln!();
        let mut figures = samples.medians();
        // The leases' floor is native renewals sent by hand: a server without them (Redis
        // 7.0 to 8.2) has no floor, and its two paths are the same scripts.
        if !found.is_some_and(|f| f.renews()) {
            eprintln!("no native renewals on this server: the leases are not measured");
            return Ok::<_, BoxError>(figures);
        }
        for count in [1_000, 10_000] {
            for (path, on) in [("native", true), ("script", false)] {
                eprintln!("{count} leases, {path}...");
                let [
                    server_cores,
                    client_cores,
                    reads,
                    lost,
                    floor_server,
                    floor_client,
                ] = leases(&client, &mut stats, on, count, hold).await?;
                figures.insert(
                    format!("{path}_{count}_leases_floor_server_cores"),
                    floor_server,
                );
                figures.insert(
                    format!("{path}_{count}_leases_floor_client_cores"),
                    floor_client,
                );
                figures.insert(format!("{path}_{count}_leases_server_cores"), server_cores);
                figures.insert(format!("{path}_{count}_leases_client_cores"), client_cores);
                figures.insert(format!("{path}_{count}_leases_round_trips_per_s"), reads);
                figures.insert(format!("{path}_{count}_leases_lost"), lost);
            }
        }
        Ok::<_, BoxError>(figures)
    })?;
    for what in ["cycle", "loaded_cycle", "renewal", "release"] {
        for kind in ["server", "exec"] {
            let get = |k: String| figures.get(&k).copied().unwrap_or(f64::NAN);
            let ratio =
                get(format!("native_{what}_{kind}_us")) / get(format!("script_{what}_{kind}_us"));
            figures.insert(format!("native_over_script_{what}_{kind}"), ratio);
        }
    }
    for what in ["cycle", "loaded_cycle"] {
        for kind in ["server", "exec"] {
            for floor in ["peers", "before"] {
                let get = |k: String| figures.get(&k).copied().unwrap_or(f64::NAN);
                let ratio = get(format!("native_{what}_{kind}_us"))
                    / get(format!("{floor}_{what}_{kind}_us"));
                figures.insert(format!("native_over_{floor}_{what}_{kind}"), ratio);
            }
        }
    }
    report(&figures, rounds, n, hold);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("server-work.json"),
        serde_json::to_string_pretty(&figures)? + "\n",
    )?;
    Ok(())
}

/// Prints the figures.
fn report(figures: &BTreeMap<String, f64>, rounds: usize, n: usize, hold: Duration) {
    let fig = |k: &str| figures.get(k).copied().unwrap_or(f64::NAN);
    println!("server µs per call (median of {rounds} rounds of {n}): executing the commands");
    println!("(INFO commandstats) | all its CPU, reading and writing included (INFO cpu)");
    println!(
        "{:<12} {:>8} {:>8} {:>6} | {:>8} {:>8} {:>6}",
        "", "native", "script", "ratio", "native", "script", "ratio"
    );
    for what in ["cycle", "loaded_cycle", "renewal", "release"] {
        let f = |k: String| fig(&k);
        println!(
            "{what:<12} {:>8.2} {:>8.2} {:>6.2} | {:>8.2} {:>8.2} {:>6.2}",
            f(format!("native_{what}_exec_us")),
            f(format!("script_{what}_exec_us")),
            f(format!("native_over_script_{what}_exec")),
            f(format!("native_{what}_server_us")),
            f(format!("script_{what}_server_us")),
            f(format!("native_over_script_{what}_server")),
        );
    }
    for what in ["cycle", "loaded_cycle"] {
        println!(
            "{:<12} {:>8.2}                   | {:>8.2}  (SET NX PX + DEL)",
            format!("floor {what}"),
            fig(&format!("set_floor_{what}_exec_us")),
            fig(&format!("set_floor_{what}_server_us"))
        );
    }
    println!("(loaded_cycle: {TASKS} tasks cycling at once on distinct keys, one handle)");
    println!("\nour cycle (native: the acquire transaction) against the cycles sent by hand:");
    println!(
        "{:<26} {:>8} {:>6} | {:>8} {:>6}",
        "", "exec", "ours/", "all CPU", "ours/"
    );
    for (floor, what) in [
        ("peers", "peers: SET NX PX + compare-del.lua"),
        ("before", "before: acquire-with-retry.lua"),
    ] {
        for cycle in ["cycle", "loaded_cycle"] {
            println!(
                "{:<26} {:>8.2} {:>6.2} | {:>8.2} {:>6.2}",
                format!("{what} ({cycle})")
                    .chars()
                    .take(26)
                    .collect::<String>(),
                fig(&format!("{floor}_{cycle}_exec_us")),
                fig(&format!("native_over_{floor}_{cycle}_exec")),
                fig(&format!("{floor}_{cycle}_server_us")),
                fig(&format!("native_over_{floor}_{cycle}_server")),
            );
        }
    }
    println!("\nwhere one cycle's execution goes (µs per cycle, one at a time; calls per cycle):");
    for who in ["native", "peers"] {
        let prefix = format!("{who}_cmd_");
        let line: Vec<String> = figures
            .iter()
            .filter_map(|(k, &us)| {
                let name = k.strip_prefix(&prefix)?.strip_suffix("_us")?;
                let calls = fig(&format!("{prefix}{name}_calls"));
                Some(format!("{name} {us:.2} ({calls:.1})"))
            })
            .collect();
        println!("{who:<7} {}", line.join(", "));
    }
    if !figures.contains_key("native_1000_leases_server_cores") {
        return;
    }
    println!("\nleases held {:.0} s at ttl 1 s:", hold.as_secs_f64());
    println!(
        "{:<16} {:>12} {:>12} {:>14} {:>6} {:>13} {:>13}",
        "",
        "server cores",
        "client cores",
        "round trips/s",
        "lost",
        "floor: server",
        "floor: client"
    );
    for count in [1_000, 10_000] {
        for path in ["native", "script"] {
            let f = |what: &str| fig(&format!("{path}_{count}_leases_{what}"));
            println!(
                "{:<16} {:>12.3} {:>12.3} {:>14.0} {:>6.0} {:>13.3} {:>13.3}",
                format!("{count} {path}"),
                f("server_cores"),
                f("client_cores"),
                f("round_trips_per_s"),
                f("lost"),
                f("floor_server_cores"),
                f("floor_client_cores"),
            );
        }
    }
}
