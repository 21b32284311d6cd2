//! What the servers do by themselves during a run, recorded as faults beside the
//! nemesis's: the stalls a server reports in its latency monitor (an `fsync` of an
//! append-only file held up by a busy disk, a slow command, a fork), and on a cluster the
//! failovers it makes on its own.
//!
//! The checker proves the promises against the faults it knows. Two soaks showed it
//! blaming the lock for what a server did unasked: on a cluster with a node timeout of a
//! second, a master stalled for about that long (a busy script that a loaded machine
//! stretched) was failed over to a replica whose fencing counter lagged, and fences
//! repeated with no failover recorded (native cluster soak, seeds 4422 and 4440); on one
//! server with `appendfsync always`, every call stalled for 1.4 s with no fault injected,
//! and a fair waiter's place lapsed in what the checker took for a calm stretch (AOF
//! script soak, seed 4307). A failover is recorded as forgetting locks and fences, as
//! the topology table says of one; a stall forgets nothing, but no stretch that holds one
//! is calm.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::history::{Event, now_ns};

/// What the servers' latency monitors report: main-thread stalls at least this long.
pub const STALL_THRESHOLD: Duration = Duration::from_millis(100);

/// How often each server's role is read (on a cluster).
const ROLE_POLL: Duration = Duration::from_millis(20);

/// How often each server's latency samples are read.
const LATENCY_POLL: Duration = Duration::from_millis(250);

/// A thread watching the servers of a run; [`ServerWatch::finish`] returns what it saw.
///
/// ```no_run
/// use lockscript_test::chaos::watch::ServerWatch;
/// let mut cluster = lockscript_test::cluster::RedisCluster::start(3, 1);
/// let watch = ServerWatch::start(cluster.urls(), true);
/// let master = cluster.masters()[0];
/// cluster.node_mut(master).stop();
/// cluster.wait_until_ok(std::time::Duration::from_secs(30));
/// let seen = watch.finish();
/// assert!(seen.iter().any(|e| matches!(e,
///     lockscript_test::chaos::history::Event::Fault { kind, .. } if kind == "failover")));
/// ```
pub struct ServerWatch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Event>>,
}

/// One server as the watch sees it.
#[derive(Default)]
struct Watched {
    con: Option<redis::Connection>,
    /// When it last answered as a replica (the time the question was sent).
    replica_at: Option<u64>,
    /// The slots it served at its last answer as a master.
    slots: Vec<(u16, u16)>,
    /// The latency samples already recorded: (event, unix second, ms).
    seen: HashSet<(String, i64, i64)>,
    /// When its latency samples were last asked for.
    asked_at: Option<u64>,
    next_latency: Option<Instant>,
}

impl ServerWatch {
    /// Watches the servers at `urls` (server `i` of the history is `urls[i]`; each with a
    /// user that may run `LATENCY`, `CONFIG` and `CLUSTER NODES`) until
    /// [`finish`](Self::finish). Each server's latency monitor is set to report stalls
    /// of [`STALL_THRESHOLD`] (again after every reconnection: a restarted or replaced
    /// server starts without it), and each new sample is recorded as a `server_stall`
    /// fault from the previous reading less the stall's length to the reading that showed
    /// it (the sample's own time is whole seconds of the server's clock, which the nemesis
    /// moves). With `cluster`, each replica seen to become a master is recorded as a
    /// `failover` fault forgetting locks and fences, with the slots it took over, from the
    /// last answer that showed it a replica to the first that showed it a master (the
    /// nemesis's own failovers are then recorded twice, which says nothing more).
    #[must_use]
    pub fn start(urls: Vec<String>, cluster: bool) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut found = Vec::new();
            let mut servers: Vec<Watched> = urls.iter().map(|_| Watched::default()).collect();
            while !flag.load(Ordering::Relaxed) {
                for (i, (url, server)) in urls.iter().zip(&mut servers).enumerate() {
                    server.look(i, url, cluster, &mut found);
                }
                std::thread::sleep(ROLE_POLL);
            }
            // The last stalls, up to the end of the run.
            for (i, (url, server)) in urls.iter().zip(&mut servers).enumerate() {
                server.next_latency = None;
                server.look(i, url, false, &mut found);
            }
            found
        });
        Self { stop, thread }
    }

    /// Stops the watch; what it saw, as faults.
    #[must_use]
    pub fn finish(self) -> Vec<Event> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

impl Watched {
    /// One look at server `i`: its role (on a cluster), and its latency samples when due.
    fn look(&mut self, i: usize, url: &str, cluster: bool, found: &mut Vec<Event>) {
        if self.con.is_none() {
            self.con = crate::cluster::probe_url(url).ok().and_then(|mut con| {
                let threshold = STALL_THRESHOLD.as_millis().to_string();
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("latency-monitor-threshold")
                    .arg(threshold)
                    .exec(&mut con)
                    .ok()
                    .map(|()| con)
            });
        }
        let Some(con) = self.con.as_mut() else {
            return;
        };
        if cluster {
            let sent = now_ns();
            let Some(view) = crate::cluster::own_view(con) else {
                self.con = None;
                return;
            };
            match (view.master, self.replica_at) {
                (false, _) => self.replica_at = Some(sent),
                (true, Some(t_start)) => {
                    found.push(Event::Fault {
                        kind: "failover".into(),
                        target: format!("server:{i}"),
                        t_start,
                        t_end: now_ns(),
                        forgets_locks: true,
                        forgets_fences: true,
                        mode: "made by the cluster, observed".into(),
                        slots: view.slots.clone(),
                    });
                    self.replica_at = None;
                }
                (true, None) => {}
            }
            if view.master {
                self.slots = view.slots;
            }
        }
        let now = Instant::now();
        if self.next_latency.is_some_and(|next| now < next) {
            return;
        }
        self.next_latency = Some(now + LATENCY_POLL);
        let sent = now_ns();
        let Ok(samples) = latency_samples(con) else {
            self.con = None;
            return;
        };
        let since = self.asked_at.unwrap_or(sent);
        self.asked_at = Some(sent);
        for sample in samples {
            if !self.seen.insert(sample.clone()) {
                continue;
            }
            // The event's name (`aof-fsync-always`, `command`, `fork`...) is the mode;
            // its length is the span's, less the readings' spacing.
            let (event, _, ms) = sample;
            let stalled = u64::try_from(ms).unwrap_or(0).saturating_mul(1_000_000);
            found.push(Event::Fault {
                kind: "server_stall".into(),
                target: format!("server:{i}"),
                t_start: since.saturating_sub(stalled),
                t_end: now_ns(),
                forgets_locks: false,
                forgets_fences: false,
                mode: event,
                slots: self.slots.clone(),
            });
        }
    }
}

/// Every sample the server's latency monitor keeps: (event, unix second, ms).
fn latency_samples(con: &mut redis::Connection) -> redis::RedisResult<Vec<(String, i64, i64)>> {
    // Each an event's name, then its latest sample's time and figures (four fields on
    // Redis 7.0, six on Valkey 9.1): only the name is read.
    let latest: Vec<Vec<redis::Value>> = redis::cmd("LATENCY").arg("LATEST").query(con)?;
    let mut samples = Vec::new();
    for line in latest {
        let Some(name) = line.into_iter().next() else {
            continue;
        };
        let event: String = redis::from_redis_value(name)?;
        let history: Vec<(i64, i64)> = redis::cmd("LATENCY")
            .arg("HISTORY")
            .arg(&event)
            .query(con)?;
        samples.extend(history.into_iter().map(|(t, ms)| (event.clone(), t, ms)));
    }
    Ok(samples)
}
