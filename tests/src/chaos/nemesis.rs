//! The nemesis: the servers of a topology, a fault-injecting proxy in front of each
//! (where clients can be made to use one), and faults drawn from the seed, several at
//! once at times. Every fault is recorded with its start and end on the shared timeline.
//!
//! On one node (with or without AOF) and on the cluster, every lock server runs on a
//! wall clock the nemesis can move ([`ServerClock`]): a `clock_forward` fault sets it
//! ahead and back again when it heals, a `clock_back` fault behind and forward again;
//! every move is recorded as a [`Event::ClockJump`] with its size.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::RngExt;
use rand::rngs::StdRng;

use super::clock::ServerClock;
use super::history::{Event, now_ns};
use super::worker::Topology;
use crate::cluster::{NODE_TIMEOUT, RedisCluster};
use crate::proxy::{Proxy, Resetting};
use crate::server::RedisServer;

/// How long a cluster must stay settled after a master came back before its fault ends:
/// past the node timeout a failure report could still appear, and from one a failover.
const SETTLED: Duration = NODE_TIMEOUT
    .saturating_mul(2)
    .saturating_add(Duration::from_millis(500));

/// One server and the proxy clients reach it through.
pub struct Node {
    /// The server.
    pub server: RedisServer,
    /// The proxy in front of it.
    pub proxy: Proxy,
    resetting: Option<Resetting>,
    /// Its wall clock, when the nemesis may move it.
    clock: Option<ServerClock>,
}

impl Node {
    fn start(builder: crate::server::ServerBuilder, clock: Option<ServerClock>) -> Self {
        let builder = match &clock {
            Some(clock) => clock.apply(builder),
            None => builder,
        };
        let server = builder.start();
        let proxy = Proxy::start(server.port());
        Self {
            server,
            proxy,
            resetting: None,
            clock,
        }
    }
}

/// The servers of a topology.
pub enum Servers {
    /// One server (with or without AOF).
    One(Node),
    /// A Redis Cluster, each node behind a proxy it announces to clients, each on a
    /// clock of its own.
    Cluster(
        RedisCluster,
        Vec<Proxy>,
        Vec<Option<Resetting>>,
        Vec<ServerClock>,
    ),
    /// Independent masters.
    Masters(Vec<Node>),
}

impl Servers {
    /// Starts what `topology` needs; the clocks' control files go in `dir`.
    pub fn start(topology: Topology, dir: &Path) -> Self {
        let clock = |i: usize| ServerClock::new(dir.join(format!("clock-{i}")));
        match topology {
            Topology::Single => Servers::One(Node::start(RedisServer::builder(), Some(clock(0)))),
            Topology::Aof => Servers::One(Node::start(
                RedisServer::builder()
                    .arg("--appendonly")
                    .arg("yes")
                    .arg("--appendfsync")
                    .arg("always"),
                Some(clock(0)),
            )),
            Topology::Cluster => {
                let clocks: Vec<ServerClock> = (0..6).map(clock).collect();
                let cluster = RedisCluster::start_with(3, 1, |i, node| clocks[i].apply(node));
                let proxies: Vec<Proxy> = cluster
                    .nodes()
                    .iter()
                    .map(|node| Proxy::start(node.port()))
                    .collect();
                for (i, proxy) in proxies.iter().enumerate() {
                    cluster.announce_port(i, proxy.port());
                }
                let resetting = proxies.iter().map(|_| None).collect();
                Servers::Cluster(cluster, proxies, resetting, clocks)
            }
            Topology::Redlock => Servers::Masters(
                (0..5)
                    .map(|_| Node::start(RedisServer::builder(), None))
                    .collect(),
            ),
        }
    }

    /// The URLs workers lock through.
    pub fn urls(&self) -> Vec<String> {
        match self {
            Servers::One(node) => vec![node.proxy.url()],
            Servers::Cluster(_, proxies, ..) => proxies.iter().map(Proxy::url).collect(),
            Servers::Masters(nodes) => nodes.iter().map(|n| n.proxy.url()).collect(),
        }
    }

    /// Every running server (the cluster's nodes too), for the final checks.
    pub fn running(&self) -> Vec<&RedisServer> {
        match self {
            Servers::One(node) => vec![&node.server],
            Servers::Cluster(cluster, ..) => cluster.nodes().iter().collect(),
            Servers::Masters(nodes) => nodes.iter().map(|n| &n.server).collect(),
        }
        .into_iter()
        .filter(|s| s.is_running())
        .collect()
    }
}

/// A fault the nemesis can inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    FreezeServer,
    KillRestart,
    Delay,
    Blackhole,
    Resets,
    ScriptFlush,
    ClientPause,
    FreezeWorker,
    KillWorker,
    Failover,
    RestartEmpty,
    ClockForward,
    ClockBack,
    /// Another client's long script keeps the server from answering anyone.
    BusyServer,
    /// Every request of one client connection (and of no other) is held back: the
    /// commands a handle sends on it reach the server after those of its other
    /// connections sent later.
    DelayOneConnection,
}

impl Kind {
    fn on_worker(self) -> bool {
        matches!(self, Kind::FreezeWorker | Kind::KillWorker)
    }

    fn name(self) -> &'static str {
        match self {
            Kind::FreezeServer => "freeze_server",
            Kind::KillRestart => "kill_restart",
            Kind::Delay => "delay",
            Kind::Blackhole => "blackhole",
            Kind::Resets => "resets",
            Kind::ScriptFlush => "script_flush",
            Kind::ClientPause => "client_pause",
            Kind::FreezeWorker => "freeze_worker",
            Kind::KillWorker => "kill_worker",
            Kind::Failover => "failover",
            Kind::RestartEmpty => "restart_empty",
            Kind::ClockForward => "clock_forward",
            Kind::ClockBack => "clock_back",
            Kind::BusyServer => "busy_server",
            Kind::DelayOneConnection => "delay_one_connection",
        }
    }
}

/// A fault in progress.
struct Active {
    kind: Kind,
    /// Which server (index) or worker.
    target: usize,
    t_start: u64,
    heal_at: Instant,
    forgets_locks: bool,
    forgets_fences: bool,
}

/// Drives faults against `servers` and the worker processes `workers` (their pids).
pub struct Nemesis {
    rng: StdRng,
    topology: Topology,
    ttl: Duration,
    workers: Vec<u32>,
    /// Workers killed (at most one per schedule); never faulted again.
    pub killed: Vec<usize>,
    active: Vec<Active>,
    /// The faults injected so far, as events.
    pub history: Vec<Event>,
}

impl Nemesis {
    /// A nemesis for `topology` whose choices come from `rng`.
    pub fn new(rng: StdRng, topology: Topology, ttl: Duration, workers: Vec<u32>) -> Self {
        Self {
            rng,
            topology,
            ttl,
            workers,
            killed: Vec::new(),
            active: Vec::new(),
            history: Vec::new(),
        }
    }

    /// Runs faults until `until`, then heals everything. A fifth of the schedule, from
    /// its middle on, starts no new fault: a calm stretch in which what only holds
    /// without faults (the fair queue's order) is checked too, and liveness after the
    /// faults healed.
    pub fn run(&mut self, servers: &mut Servers, until: Instant) {
        let started = Instant::now();
        let span = until.saturating_duration_since(started);
        let calm = (started + span / 2)..(started + span / 2 + span / 5);
        while Instant::now() < until {
            let nap = Duration::from_millis(self.rng.random_range(100..700));
            let next = (Instant::now() + nap).min(until);
            while Instant::now() < next {
                self.heal_due(servers, Instant::now());
                std::thread::sleep(Duration::from_millis(5));
            }
            // Up to two faults at once (three on Redlock, sometimes a majority).
            let most = if self.topology == Topology::Redlock {
                3
            } else {
                2
            };
            if self.active.len() < most && !calm.contains(&Instant::now()) {
                self.inject(servers);
            }
        }
        let far = Instant::now() + Duration::from_secs(3600);
        self.heal_due(servers, far);
    }

    fn heal_due(&mut self, servers: &mut Servers, now: Instant) {
        let (due, rest): (Vec<Active>, Vec<Active>) =
            self.active.drain(..).partition(|a| a.heal_at <= now);
        self.active = rest;
        for fault in due {
            self.heal(servers, &fault);
            self.history.push(Event::Fault {
                kind: fault.kind.name().to_owned(),
                target: target_name(fault.kind, fault.target),
                t_start: fault.t_start,
                t_end: now_ns(),
                forgets_locks: fault.forgets_locks,
                forgets_fences: fault.forgets_fences,
            });
        }
    }

    fn busy(&self, kind: Kind, target: usize) -> bool {
        let worker = kind.on_worker();
        worker && self.killed.contains(&target)
            || self
                .active
                .iter()
                .any(|a| a.target == target && a.kind.on_worker() == worker)
    }

    fn ms(&mut self, range: std::ops::Range<u64>) -> Duration {
        Duration::from_millis(self.rng.random_range(range))
    }

    /// A fault and a target that is not already faulted (`None`: not now).
    fn pick(&mut self, servers: &Servers) -> Option<(Kind, usize)> {
        // What every topology suffers, then what only some do.
        const ANYWHERE: [Kind; 9] = [
            Kind::FreezeServer,
            Kind::Delay,
            Kind::Blackhole,
            Kind::Resets,
            Kind::ScriptFlush,
            Kind::ClientPause,
            Kind::FreezeWorker,
            Kind::BusyServer,
            Kind::DelayOneConnection,
        ];
        let more: &[Kind] = match self.topology {
            Topology::Single | Topology::Aof => {
                &[Kind::KillRestart, Kind::ClockForward, Kind::ClockBack]
            }
            Topology::Redlock => &[Kind::KillRestart],
            Topology::Cluster => &[
                Kind::Failover,
                Kind::RestartEmpty,
                Kind::ClockForward,
                Kind::ClockBack,
            ],
        };
        let menu: Vec<Kind> = ANYWHERE
            .iter()
            .chain(more)
            .chain(&[Kind::KillWorker])
            .copied()
            .collect();
        let kind = menu[self.rng.random_range(0..menu.len())];
        // One worker killed per schedule at most, and never the last one standing.
        if kind == Kind::KillWorker && (!self.killed.is_empty() || self.workers.len() < 2) {
            return None;
        }
        let target = match (kind, servers) {
            (kind, _) if kind.on_worker() => self.rng.random_range(0..self.workers.len()),
            (_, Servers::One(_)) => 0,
            (_, Servers::Masters(nodes)) => self.rng.random_range(0..nodes.len()),
            // Faults go to masters (a frozen replica would only delay a failover).
            (_, Servers::Cluster(cluster, ..)) => {
                let masters = cluster.masters();
                masters[self.rng.random_range(0..masters.len())]
            }
        };
        // On a cluster one server fault at a time: a failover waits for the cluster to
        // settle, which it cannot while another master is frozen.
        let exclusive = self.topology == Topology::Cluster
            && !kind.on_worker()
            && self.active.iter().any(|a| !a.kind.on_worker());
        (!exclusive && !self.busy(kind, target)).then_some((kind, target))
    }

    /// Picks a fault and a target that is not already faulted, and injects it.
    fn inject(&mut self, servers: &mut Servers) {
        let Some((kind, target)) = self.pick(servers) else {
            return;
        };
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(1_000);
        let t_start = now_ns();
        let (mut forgets_locks, mut forgets_fences) = (false, false);
        let lasts = match (kind, &mut *servers) {
            (Kind::ClockForward | Kind::ClockBack, servers) => {
                // On the cluster below its node timeout (1 s): a bigger jump of the bus's
                // timers would make the node count its peers as failing, another fault.
                let most = match self.topology {
                    Topology::Cluster => 800,
                    _ => ttl_ms * 4,
                };
                let size = i64::try_from(self.rng.random_range(1..most)).unwrap_or(1);
                let offset = if kind == Kind::ClockForward {
                    size
                } else {
                    -size
                };
                self.move_clock(servers, target, offset);
                self.ms(200..1_500)
            }
            (Kind::FreezeWorker, _) => {
                signal(self.workers[target], rustix::process::Signal::STOP);
                // Sometimes longer than a lease.
                self.ms(50..ttl_ms * 3)
            }
            (Kind::KillWorker, _) => {
                signal(self.workers[target], rustix::process::Signal::KILL);
                self.killed.push(target);
                Duration::ZERO
            }
            (Kind::Failover, Servers::Cluster(cluster, ..)) => {
                cluster.node_mut(target).stop();
                cluster.wait_until_ok(Duration::from_secs(60));
                (forgets_locks, forgets_fences) = (true, true);
                Duration::ZERO
            }
            (Kind::RestartEmpty, Servers::Cluster(cluster, proxies, ..)) => {
                // Back before the others notice (node timeout 1 s): the same master of
                // the same slots, with nothing in it.
                cluster.node_mut(target).restart();
                cluster.announce_port(target, proxies[target].port());
                // Unless it came back too late: then its replica takes the slots over a
                // second or two after, and both serve them until the old master hears of
                // it. The fault lasts until no failover can follow.
                cluster.wait_until_settled(SETTLED, Duration::from_secs(60));
                (forgets_locks, forgets_fences) = (true, true);
                Duration::ZERO
            }
            (
                Kind::Delay | Kind::Blackhole | Kind::Resets | Kind::DelayOneConnection,
                Servers::Cluster(_, proxies, resetting, _),
            ) => self.proxy_fault(kind, &proxies[target], &mut resetting[target]),
            (kind, Servers::Cluster(cluster, ..)) => {
                self.cluster_fault(kind, cluster.node_mut(target))
            }
            (kind, Servers::One(node)) => {
                if kind == Kind::KillRestart && self.topology != Topology::Aof {
                    (forgets_locks, forgets_fences) = (true, true);
                }
                self.server_fault(kind, node, false)
            }
            (kind, Servers::Masters(nodes)) => {
                // A restarted master stays down past every lease it held (Redlock's
                // assumption), but its fencing counter is gone.
                forgets_fences = kind == Kind::KillRestart;
                self.server_fault(kind, &mut nodes[target], true)
            }
        };
        self.active.push(Active {
            kind,
            target,
            t_start,
            heal_at: Instant::now() + lasts,
            forgets_locks,
            forgets_fences,
        });
    }

    /// Sets server `target`'s clock to `offset_ms` from the real time, and records the
    /// move.
    fn move_clock(&mut self, servers: &mut Servers, target: usize, offset_ms: i64) {
        let clock = match servers {
            Servers::One(node) => node.clock.as_mut(),
            Servers::Cluster(.., clocks) => clocks.get_mut(target),
            Servers::Masters(nodes) => nodes.get_mut(target).and_then(|n| n.clock.as_mut()),
        };
        let Some(clock) = clock else { return };
        let step_ms = offset_ms - clock.offset_ms();
        // Dated before the write: the server may see the new offset as soon as the file
        // is renamed, before this process gets to read the clock again.
        let t = now_ns();
        clock.set(offset_ms);
        self.history.push(Event::ClockJump {
            target: format!("server:{target}"),
            t,
            step_ms,
            offset_ms,
        });
    }

    /// A fault on the network in front of a server (its proxy); how long it lasts.
    fn proxy_fault(
        &mut self,
        kind: Kind,
        proxy: &Proxy,
        resetting: &mut Option<Resetting>,
    ) -> Duration {
        match kind {
            Kind::Delay => {
                let delay = self.ms(20..700);
                proxy.set_delay(delay);
                self.ms(300..1_500)
            }
            Kind::Blackhole => {
                proxy.set_blackhole(true);
                self.ms(200..1_200)
            }
            Kind::DelayOneConnection => {
                let pick = self.rng.random_range(0..64);
                let delay = self.ms(20..500);
                proxy.delay_one_connection(pick, delay);
                self.ms(300..1_500)
            }
            _ => {
                if self.rng.random_bool(0.5) {
                    proxy.reset();
                    Duration::ZERO
                } else {
                    *resetting = Some(proxy.keep_resetting(Duration::from_millis(20)));
                    self.ms(200..1_000)
                }
            }
        }
    }

    /// A fault on one master of a cluster; how long it lasts.
    fn cluster_fault(&mut self, kind: Kind, server: &RedisServer) -> Duration {
        match kind {
            // Well below the cluster's node timeout (1 s): no failover.
            Kind::FreezeServer => {
                server.signal("STOP");
                self.ms(100..500)
            }
            Kind::BusyServer => {
                let busy = self.ms(100..500);
                drop(server.busy_for(busy));
                busy
            }
            Kind::ScriptFlush => {
                let _: Result<(), _> = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query(&mut server.connection());
                Duration::ZERO
            }
            _ => {
                let pause = self.ms(100..500);
                client_pause(server, pause, self.rng.random_bool(0.5));
                pause
            }
        }
    }

    /// A fault on one server behind its proxy; how long it lasts. A restarted Redlock
    /// master stays down past a lease.
    fn server_fault(&mut self, kind: Kind, node: &mut Node, redlock: bool) -> Duration {
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(1_000);
        match kind {
            Kind::FreezeServer => {
                node.server.signal("STOP");
                self.ms(100..1_200)
            }
            Kind::KillRestart => {
                node.server.stop();
                if redlock {
                    self.ms(ttl_ms + 100..ttl_ms * 3)
                } else {
                    self.ms(0..800)
                }
            }
            Kind::Delay | Kind::Blackhole | Kind::Resets | Kind::DelayOneConnection => {
                self.proxy_fault(kind, &node.proxy, &mut node.resetting)
            }
            Kind::BusyServer => {
                let busy = self.ms(100..1_000);
                drop(node.server.busy_for(busy));
                busy
            }
            Kind::ScriptFlush => {
                let _: Result<(), _> = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query(&mut node.server.connection());
                Duration::ZERO
            }
            _ => {
                let pause = self.ms(100..1_000);
                client_pause(&node.server, pause, self.rng.random_bool(0.5));
                pause
            }
        }
    }

    fn heal(&mut self, servers: &mut Servers, fault: &Active) {
        match (fault.kind, servers) {
            (Kind::FreezeWorker, _) => {
                signal(self.workers[fault.target], rustix::process::Signal::CONT);
            }
            (Kind::ClockForward | Kind::ClockBack, servers) => {
                self.move_clock(servers, fault.target, 0);
            }
            (Kind::Failover, Servers::Cluster(cluster, proxies, ..)) => {
                // The killed master comes back and rejoins as a replica.
                cluster.node_mut(fault.target).restart();
                cluster.announce_port(fault.target, proxies[fault.target].port());
                // It claims its old slots until it hears of the new epoch.
                cluster.wait_until_settled(SETTLED, Duration::from_secs(60));
            }
            (Kind::FreezeServer, Servers::Cluster(cluster, ..)) => {
                cluster.node(fault.target).signal("CONT");
            }
            (kind, Servers::Cluster(_, proxies, resetting, _)) => {
                heal_proxy(kind, &proxies[fault.target], &mut resetting[fault.target]);
            }
            (kind, Servers::One(node)) => heal_node(kind, node),
            (kind, Servers::Masters(nodes)) => heal_node(kind, &mut nodes[fault.target]),
        }
    }
}

fn target_name(kind: Kind, target: usize) -> String {
    if kind.on_worker() {
        format!("worker:{target}")
    } else {
        format!("server:{target}")
    }
}

fn heal_proxy(kind: Kind, proxy: &Proxy, resetting: &mut Option<Resetting>) {
    match kind {
        Kind::Delay => proxy.set_delay(Duration::ZERO),
        Kind::Blackhole => proxy.set_blackhole(false),
        Kind::Resets => *resetting = None,
        Kind::DelayOneConnection => {
            proxy.delay_one_connection(0, Duration::ZERO);
        }
        _ => {}
    }
}

fn heal_node(kind: Kind, node: &mut Node) {
    match kind {
        Kind::FreezeServer => node.server.signal("CONT"),
        Kind::KillRestart => node.server.restart(),
        kind => heal_proxy(kind, &node.proxy, &mut node.resetting),
    }
}

fn client_pause(server: &RedisServer, pause: Duration, all: bool) {
    let _: Result<(), _> = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(u64::try_from(pause.as_millis()).unwrap_or(1_000))
        .arg(if all { "ALL" } else { "WRITE" })
        .query(&mut server.connection());
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, sig);
    }
}
