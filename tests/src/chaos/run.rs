//! One chaos run: servers, worker processes, the nemesis, then the checks over the
//! whole history (the checker's, plus what only the run can see: workers that crashed
//! or hung, locks left behind, the store's log).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::checker::{self, Bounds, Report};
use super::history::{self, Event, now_ns};
use super::nemesis::Nemesis;
use super::servers::{self, Servers};
use super::watch::ServerWatch;
use super::worker::{CONFIG_VAR, LONG_TTL, Topology, WorkerConfig};
use crate::server::RedisServer;

/// What to run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Where the locks live.
    pub topology: Topology,
    /// Seeds the nemesis and the workers.
    pub seed: u64,
    /// How long the workers run under faults.
    pub run_for: Duration,
    /// How many worker processes.
    pub workers: u32,
    /// The lease.
    pub ttl: Duration,
    /// `lock()`'s wait.
    pub wait: Duration,
    /// Where histories and worker output go.
    pub dir: PathBuf,
    /// The chaos binary (it runs the workers with `worker`).
    pub exe: PathBuf,
    /// A known bug to put back in the workers (`no-deadline`).
    pub mutant: Option<String>,
    /// The fault kinds the nemesis draws from (every one that applies when `None`).
    pub faults: Option<Vec<String>>,
    /// The other product's server binary, for `replace_server`, or why there is none
    /// (see [`servers::other_product`]).
    pub other: Result<PathBuf, String>,
}

/// How late `lost()` may fire: the guide's figure.
pub const SLACK: Duration = Duration::from_millis(100);

/// How far a call may overrun its bound under the chaos load (four worker processes,
/// servers and proxies on two cores): the scheduling delay of the call's last timer.
/// The worst seen in 84 000 calls was 133 ms.
pub const CALL_SLACK: Duration = Duration::from_millis(250);

/// What a run found.
pub struct Outcome {
    /// The checker's report, with the run's own findings added.
    pub report: Report,
    /// Every event of the run.
    pub events: Vec<Event>,
    /// When the run started on the timeline (to print windows relative to it).
    pub t0: u64,
    /// What the run could not do, or how it did it (a fault skipped, the servers a
    /// replacement swapped), for the summary.
    pub notes: Vec<String>,
}

/// The bound of one call that is not `lock()`, for a topology: the response timeout, or
/// for Redlock three node timeouts.
fn call_bound(topology: Topology) -> Duration {
    match topology {
        Topology::Redlock => lockscript::DEFAULT_NODE_TIMEOUT * 3,
        _ => lockscript::DEFAULT_RESPONSE_TIMEOUT,
    }
}

/// The lease's drift margin for a ttl: 1% + 2 ms (what the holder takes off its lease).
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The bounds a run of `cfg` is held to.
fn bounds(cfg: &RunConfig) -> Bounds {
    Bounds {
        slack: SLACK,
        call_slack: CALL_SLACK,
        wait_timeout: cfg.wait,
        call: call_bound(cfg.topology),
        drift: drift(cfg.ttl),
    }
}

/// Starts the worker processes of `cfg` against `servers` and the fenced `store`: each
/// one's number, process and history file.
fn spawn_workers(
    cfg: &RunConfig,
    servers: &Servers,
    store: &RedisServer,
) -> Vec<(u32, Child, PathBuf)> {
    let mut children: Vec<(u32, Child, PathBuf)> = Vec::new();
    for worker in 0..cfg.workers {
        let out = cfg.dir.join(format!("worker-{worker}.jsonl"));
        let config = WorkerConfig {
            worker,
            topology: cfg.topology,
            urls: servers.urls(),
            pool_urls: servers.pool_urls(),
            store: store.url(),
            seed: cfg.seed.wrapping_mul(1_000).wrapping_add(u64::from(worker)),
            run_for_ms: millis(cfg.run_for),
            ttl_ms: millis(cfg.ttl),
            wait_ms: millis(cfg.wait),
            out: out.clone(),
            mutant: cfg.mutant.clone(),
        };
        let log = cfg.dir.join(format!("worker-{worker}.log"));
        let log = std::fs::File::create(&log).expect("a worker's log file");
        let child = Command::new(&cfg.exe)
            .arg("worker")
            .env(
                CONFIG_VAR,
                serde_json::to_string(&config).expect("a config"),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", cfg.exe.display()));
        children.push((worker, child, out));
    }
    children
}

/// Runs `cfg` and checks it.
///
/// # Panics
///
/// If the servers or the worker processes cannot be started.
pub fn run(cfg: &RunConfig) -> Outcome {
    std::fs::create_dir_all(&cfg.dir).expect("the run's directory");
    let t0 = now_ns();
    let store = RedisServer::start();
    let mut servers = Servers::start(cfg.topology, &cfg.dir, cfg.other.as_deref().ok());
    let notes = notes(cfg, &servers);
    let children = spawn_workers(cfg, &servers, &store);
    let monitor = monitor(&servers, &cfg.dir);
    let watch = ServerWatch::start(
        servers.watch_urls(),
        matches!(servers, Servers::Cluster(..)),
    );
    let pids = children.iter().map(|(_, c, _)| c.id()).collect();
    let mut nemesis = Nemesis::new(
        StdRng::seed_from_u64(cfg.seed),
        cfg.topology,
        cfg.ttl,
        pids,
        cfg.faults.clone(),
    );
    // The workers connect first; then faults until they stop working.
    std::thread::sleep(Duration::from_millis(300));
    nemesis.run(&mut servers, Instant::now() + cfg.run_for);
    nemesis.history.extend(watch.finish());

    let mut events = nemesis.history.clone();
    if let Some((stop, thread)) = monitor {
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = thread.join();
    }
    let mut found = std::mem::take(&mut nemesis.trouble);
    let deadline = Instant::now() + cfg.wait + Duration::from_secs(15);
    for (worker, mut child, out) in children {
        let status = wait_until(&mut child, deadline);
        // A worker the nemesis killed: its keys expire by their TTL (checked below).
        if usize::try_from(worker).is_ok_and(|w| nemesis.killed.contains(&w)) {
            events.extend(history::read(&out));
            continue;
        }
        let log = std::fs::read_to_string(cfg.dir.join(format!("worker-{worker}.log")))
            .unwrap_or_default();
        match status {
            Some(s) if s.success() => {}
            Some(s) => found.push(format!("worker {worker} failed ({s}): {}", tail(&log, 20))),
            None => found.push(format!(
                "worker {worker} did not stop within {:?} of the end",
                cfg.wait + Duration::from_secs(15)
            )),
        }
        if log.contains("panicked") {
            found.push(format!("worker {worker} panicked: {}", tail(&log, 20)));
        }
        events.extend(history::read(&out));
    }
    // The long-lease actor's leases are the longest.
    let within = cfg.ttl.max(LONG_TTL) + Duration::from_secs(2);
    let left = left_behind(&servers, within);
    if !left.is_empty() {
        found.push(format!(
            "locks left behind {within:?} after every worker stopped: {left:?}"
        ));
    }
    let logs = store_logs(cfg.topology, &store, &servers);
    record_all(
        &cfg.dir.join("nemesis.jsonl"),
        nemesis.history.iter().chain(&logs),
    );
    events.extend(logs);
    let mut report = checker::check(&events, &bounds(cfg));
    for what in found {
        report.violations.push(checker::Violation {
            kind: "run",
            what,
            from: t0,
            to: now_ns(),
            events: Vec::new(),
        });
    }
    report
        .figures
        .insert("violations".to_owned(), report.violations.len() as u64);
    drop(servers);
    Outcome {
        report,
        events,
        t0,
        notes,
    }
}

/// What the summary says of the faults that need more than the topology: which servers
/// `replace_server` swaps, or why it is skipped.
fn notes(cfg: &RunConfig, servers: &Servers) -> Vec<String> {
    let skipped = cfg
        .faults
        .as_ref()
        .is_some_and(|only| !only.iter().any(|k| k == "replace_server"));
    if skipped {
        return Vec::new();
    }
    if cfg.topology == Topology::Cluster {
        return vec![
            "replace_server and demote do not run on the cluster (its nodes cannot follow \
             another server by REPLICAOF; failover and restart_empty replace a master there)"
                .to_owned(),
        ];
    }
    vec![match &cfg.other {
        Ok(other) => format!(
            "replace_server swaps {} and {} ({})",
            servers::describe(servers.server(0)),
            if servers::describe(servers.server(0)).starts_with("Valkey") {
                "Redis"
            } else {
                "Valkey"
            },
            other.display()
        ),
        Err(why) => format!("replace_server skipped: only one server product at hand ({why})"),
    }]
}

/// Writes `events` to `path`, one JSON line each (the nemesis's history and the store's
/// log, beside the workers' files).
fn record_all<'a>(path: &Path, events: impl Iterator<Item = &'a Event>) {
    let lines: Vec<String> = events
        .filter_map(|e| serde_json::to_string(e).ok())
        .collect();
    let _ = std::fs::write(path, lines.join("\n") + "\n");
}

fn ms_since(t0: u64, t: u64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let ms = t.saturating_sub(t0) as f64 / 1e6;
    ms
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The child's exit status, or `None` (and the child killed) if it is still running at
/// `deadline`.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<std::process::ExitStatus> {
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Lock keys still present on any server after `within` (their TTL frees the ones of a
/// worker that could not release).
fn left_behind(servers: &Servers, within: Duration) -> Vec<String> {
    let give_up = Instant::now() + within;
    loop {
        let mut left = Vec::new();
        for server in servers.running() {
            let Ok(mut conn) = server.client().get_connection() else {
                continue;
            };
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("lock:*")
                .query(&mut conn)
                .unwrap_or_default();
            // Each with its time to live, in milliseconds (-1: none), to say why. A fencing
            // counter and an election's leader record outlive their lock on purpose (the
            // counter goes on rising; the record is read only as the lock holder's).
            let locks = keys
                .into_iter()
                .filter(|k| !k.ends_with(":fence") && !k.ends_with(":leader"));
            for key in locks {
                let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap_or(-3);
                left.push(format!("{key} (pttl {pttl})"));
            }
        }
        left.sort();
        left.dedup();
        // A replica lists its master's keys too; they go with them.
        if left.is_empty() || Instant::now() >= give_up {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The running lock servers that are masters (a replica lists its master's keys too).
fn masters(servers: &Servers) -> Vec<&RedisServer> {
    servers
        .running()
        .into_iter()
        .filter(|server| {
            let role: Option<Vec<redis::Value>> = server
                .client()
                .get_connection()
                .ok()
                .and_then(|mut c| redis::cmd("ROLE").query(&mut c).ok());
            matches!(role.as_deref(), Some([redis::Value::BulkString(r), ..]) if r == b"master")
        })
        .collect()
}

/// The logs of accepted fencing tokens, one event per lock and store: on the separate
/// fenced store, and on the lock servers' masters (which took the guarded writes) but on
/// Redlock.
fn store_logs(topology: Topology, store: &RedisServer, servers: &Servers) -> Vec<Event> {
    let mut stores = vec![store];
    if topology != Topology::Redlock {
        stores.extend(masters(servers));
    }
    stores
        .iter()
        .flat_map(|store| store_logs_of(store))
        .collect()
}

fn store_logs_of(store: &RedisServer) -> Vec<Event> {
    let Ok(mut conn) = store.client().get_connection() else {
        return Vec::new();
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("data:*:log")
        .query(&mut conn)
        .unwrap_or_default();
    keys.into_iter()
        .map(|key| {
            let fences: Vec<u64> = redis::cmd("LRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query(&mut conn)
                .unwrap_or_default();
            let lock = key
                .trim_start_matches("data:{")
                .trim_end_matches("}:log")
                .to_owned();
            Event::StoreLog { lock, fences }
        })
        .collect()
}

/// Prints a run's figures and violations; windows are shown in ms since the run's start.
pub fn print(cfg: &RunConfig, outcome: &Outcome) {
    let figures: &BTreeMap<String, u64> = &outcome.report.figures;
    println!(
        "\nchaos {} seed {} ({:?}, {} workers){}",
        cfg.topology.name(),
        cfg.seed,
        cfg.run_for,
        cfg.workers,
        cfg.mutant
            .as_ref()
            .map_or(String::new(), |m| format!(", mutant {m}"))
    );
    for (what, n) in figures {
        println!("  {what:<48} {n:>8}");
    }
    for note in &outcome.notes {
        println!("NOTE: {note}");
    }
    // One line each: the events are in the histories (`chaos check DIR` prints them).
    for v in &outcome.report.explained {
        println!(
            "EXPLAINED (seed {}, expected: a move of a server's clock beyond the drift margin) \
             at {:.1} ms: {}: {}",
            cfg.seed,
            ms_since(outcome.t0, v.from),
            v.kind,
            v.what
        );
    }
    for v in &outcome.report.violations {
        let at = |t: u64| {
            #[allow(clippy::cast_precision_loss)]
            let ms = t.saturating_sub(outcome.t0) as f64 / 1e6;
            ms
        };
        println!(
            "VIOLATION (seed {}) at {:.1}..{:.1} ms: {v}",
            cfg.seed,
            at(v.from),
            at(v.to)
        );
    }
}

/// The history files of a run directory (to check a recorded run again).
pub fn histories(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// With `LOCKSCRIPT_CHAOS_MONITOR` set, records every command each server runs
/// (`redis-cli MONITOR`, reconnecting after a restart) to `monitor-<port>.log` in `dir`:
/// the server's side of a history, to explain a violation.
fn monitor(
    servers: &Servers,
    dir: &Path,
) -> Option<(
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<()>,
)> {
    std::env::var_os("LOCKSCRIPT_CHAOS_MONITOR")?;
    let ports: Vec<u16> = servers.running().iter().map(|s| s.port()).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dir = dir.to_path_buf();
    let flag = std::sync::Arc::clone(&stop);
    let thread = std::thread::spawn(move || {
        let mut children: Vec<(u16, Option<Child>)> = ports.iter().map(|p| (*p, None)).collect();
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            for (port, child) in &mut children {
                let alive = child
                    .as_mut()
                    .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
                if !alive {
                    let Ok(log) = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(dir.join(format!("monitor-{port}.log")))
                    else {
                        continue;
                    };
                    *child = Command::new("redis-cli")
                        .args(["-p", &port.to_string(), "monitor"])
                        .stdout(log)
                        .stderr(Stdio::null())
                        .spawn()
                        .ok();
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for (_, child) in &mut children {
            if let Some(mut c) = child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    });
    Some((stop, thread))
}
