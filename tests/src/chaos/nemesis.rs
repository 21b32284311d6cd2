//! The nemesis: faults drawn from the seed against the servers of a topology (see
//! [`Servers`]) and the worker processes, several at once at times. Every fault is
//! recorded with its start and end on the shared timeline.
//!
//! On one node (with or without AOF) and on the cluster, every lock server runs on a
//! wall clock the nemesis can move ([`ServerClock`](super::clock::ServerClock)): a
//! `clock_forward` fault sets it ahead and back again when it heals, a `clock_back`
//! fault behind and forward again; every move is recorded as a [`Event::ClockJump`]
//! with its size.

use std::time::{Duration, Instant};

use rand::RngExt;
use rand::rngs::StdRng;

use super::history::{Event, now_ns};
use super::servers::{self, Node, Servers};
use super::worker::{LONG_TTL, Topology};
use crate::cluster::NODE_TIMEOUT;
use crate::proxy::{Proxy, Resetting};
use crate::server::RedisServer;

/// How long a cluster must stay settled after a master came back before its fault ends:
/// past the node timeout a failure report could still appear, and from one a failover.
const SETTLED: Duration = NODE_TIMEOUT
    .saturating_mul(2)
    .saturating_add(Duration::from_millis(500));

/// A fault the nemesis can inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    FreezeServer,
    KillRestart,
    Delay,
    Blackhole,
    Resets,
    ScriptFlush,
    /// `CLIENT PAUSE` for a while, `ALL` or `WRITE` (half and half; the mode is recorded).
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
    /// connections sent later. Every other time one of the pooled actor's connections.
    DelayOneConnection,
    /// The lock user's pub/sub rights taken away (`ACL SETUSER chaos resetchannels`)
    /// and given back.
    AclChannels,
    /// One command the locks use denied to the lock user (`ACL SETUSER chaos -evalsha`,
    /// `-fcall`, `-set`, `-delifeq`, `-publish`...) and allowed again.
    AclDeny,
    /// The server behind the address replaced by the other product's (Redis 7.0 by
    /// Valkey 9.1 or the other way: native commands against scripts), the data carried
    /// over, and put back the same way.
    ReplaceServer,
    /// The primary demoted to a replica, with its data (`READONLY` to every write), and
    /// promoted back.
    Demote,
}

/// Every kind, for [`Kind::named`].
const KINDS: [Kind; 19] = [
    Kind::FreezeServer,
    Kind::KillRestart,
    Kind::Delay,
    Kind::Blackhole,
    Kind::Resets,
    Kind::ScriptFlush,
    Kind::ClientPause,
    Kind::FreezeWorker,
    Kind::KillWorker,
    Kind::Failover,
    Kind::RestartEmpty,
    Kind::ClockForward,
    Kind::ClockBack,
    Kind::BusyServer,
    Kind::DelayOneConnection,
    Kind::AclChannels,
    Kind::AclDeny,
    Kind::ReplaceServer,
    Kind::Demote,
];

/// The commands `acl_deny` may deny, where the server has them.
const DENIABLE: [&str; 6] = ["evalsha", "fcall", "set", "delifeq", "delex", "publish"];

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
            Kind::AclChannels => "acl_channels",
            Kind::AclDeny => "acl_deny",
            Kind::ReplaceServer => "replace_server",
            Kind::Demote => "demote",
        }
    }

    /// Whether `name` names a kind.
    fn named(name: &str) -> bool {
        KINDS.iter().any(|k| k.name() == name)
    }
}

/// The names of every fault kind (for `--faults`).
pub fn kind_names() -> Vec<&'static str> {
    KINDS.iter().map(|k| k.name()).collect()
}

/// Whether `name` is a fault kind's name.
pub fn is_kind(name: &str) -> bool {
    Kind::named(name)
}

/// What an injection did: how long the fault lasts, how it was made (the recorded
/// mode), and whether there is anything to undo.
struct Injected {
    lasts: Duration,
    mode: String,
    made: bool,
}

impl Injected {
    fn lasting(lasts: Duration) -> Self {
        Self {
            lasts,
            mode: String::new(),
            made: true,
        }
    }

    fn with_mode(lasts: Duration, mode: impl Into<String>) -> Self {
        Self {
            lasts,
            mode: mode.into(),
            made: true,
        }
    }

    /// Nothing was changed: `why`, recorded as the mode.
    fn not_made(why: &str) -> Self {
        Self {
            lasts: Duration::ZERO,
            mode: format!("not made: {why}"),
            made: false,
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
    mode: String,
    /// The hash slots the target served when the fault began (on a cluster).
    slots: Vec<(u16, u16)>,
    /// Whether the fault changed anything to undo.
    made: bool,
}

/// Drives faults against `servers` and the worker processes `workers` (their pids).
pub struct Nemesis {
    rng: StdRng,
    topology: Topology,
    ttl: Duration,
    workers: Vec<u32>,
    /// The fault kinds drawn from (every one that applies when `None`); each is drawn
    /// once before any is drawn again, so a short run has them all.
    only: Option<Vec<String>>,
    /// The kinds injected so far.
    injected: Vec<Kind>,
    /// Whether the next `delay_one_connection` on a node holds back one of the pool's
    /// connections (they alternate, the pool's first).
    pool_turn: bool,
    /// Workers killed (at most one per schedule); never faulted again.
    pub killed: Vec<usize>,
    active: Vec<Active>,
    /// The faults injected so far, as events (the topology first).
    pub history: Vec<Event>,
    /// What went wrong in the nemesis itself (a server it could not put back): each is
    /// reported with the run's findings.
    pub trouble: Vec<String>,
}

impl Nemesis {
    /// A nemesis for `topology` whose choices come from `rng`, drawing the fault kinds
    /// named in `only` (every kind that applies when `None`).
    pub fn new(
        rng: StdRng,
        topology: Topology,
        ttl: Duration,
        workers: Vec<u32>,
        only: Option<Vec<String>>,
    ) -> Self {
        Self {
            rng,
            topology,
            ttl,
            workers,
            only,
            injected: Vec::new(),
            pool_turn: true,
            killed: Vec::new(),
            active: Vec::new(),
            history: vec![Event::Topology {
                name: topology.name().to_owned(),
            }],
            trouble: Vec::new(),
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
            self.heal_until(servers, next);
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
        // The workers still finish their calls after `until`. A Redlock master restarted
        // without its data stays down past every lease it may have held even now: healed
        // early, it let a second holder take a 2 s lease the master forgot 71 ms after
        // the restart began (a Redlock script soak, seed 5627, its last second).
        if self.topology == Topology::Redlock {
            let restarts = self.active.iter().filter(|a| a.kind == Kind::KillRestart);
            if let Some(last) = restarts.map(|a| a.heal_at).max() {
                self.heal_until(servers, last);
            }
        }
        let far = Instant::now() + Duration::from_secs(3600);
        self.heal_due(servers, far);
    }

    /// Heals each fault as it falls due, until `until`.
    fn heal_until(&mut self, servers: &mut Servers, until: Instant) {
        while Instant::now() < until {
            self.heal_due(servers, Instant::now());
            std::thread::sleep(Duration::from_millis(5));
        }
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
                mode: fault.mode,
                slots: fault.slots,
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
        const ANYWHERE: [Kind; 11] = [
            Kind::FreezeServer,
            Kind::Delay,
            Kind::Blackhole,
            Kind::Resets,
            Kind::ScriptFlush,
            Kind::ClientPause,
            Kind::FreezeWorker,
            Kind::BusyServer,
            Kind::DelayOneConnection,
            Kind::AclChannels,
            Kind::AclDeny,
        ];
        let more: &[Kind] = match self.topology {
            Topology::Single | Topology::Aof => &[
                Kind::KillRestart,
                Kind::ClockForward,
                Kind::ClockBack,
                Kind::ReplaceServer,
                Kind::Demote,
            ],
            Topology::Redlock => &[Kind::KillRestart, Kind::ReplaceServer, Kind::Demote],
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
            .filter(|k| *k != Kind::ReplaceServer || servers.can_be_replaced())
            .filter(|k| {
                self.only
                    .as_ref()
                    .is_none_or(|only| only.iter().any(|n| n == k.name()))
            })
            .collect();
        // Named kinds: each once first.
        let fresh: Vec<Kind> = menu
            .iter()
            .copied()
            .filter(|k| self.only.is_some() && !self.injected.contains(k))
            .collect();
        let menu = if fresh.is_empty() { menu } else { fresh };
        if menu.is_empty() {
            return None;
        }
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
        // On a cluster, the slots of the master it hits: what a lease there may lose.
        let slots = match &*servers {
            Servers::Cluster(cluster, ..) if !kind.on_worker() => cluster.slots_of(target),
            _ => Vec::new(),
        };
        let t_start = now_ns();
        let (mut forgets_locks, mut forgets_fences) = (false, false);
        let injected = match (kind, &mut *servers) {
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
                Injected::lasting(self.ms(200..1_500))
            }
            (Kind::FreezeWorker, _) => {
                signal(self.workers[target], rustix::process::Signal::STOP);
                // Sometimes longer than a lease.
                Injected::lasting(self.ms(50..ttl_ms * 3))
            }
            (Kind::KillWorker, _) => {
                signal(self.workers[target], rustix::process::Signal::KILL);
                self.killed.push(target);
                Injected::lasting(Duration::ZERO)
            }
            (Kind::Failover, Servers::Cluster(cluster, ..)) => {
                cluster.node_mut(target).stop();
                cluster.wait_until_ok(Duration::from_secs(60));
                (forgets_locks, forgets_fences) = (true, true);
                Injected::lasting(Duration::ZERO)
            }
            (Kind::RestartEmpty, Servers::Cluster(cluster, proxies, ..)) => {
                // Back before the others notice (node timeout 1 s): the same master of
                // the same slots, with nothing in it.
                cluster.node_mut(target).restart();
                servers::grant_native(cluster.node(target));
                cluster.announce_port(target, proxies[target].port());
                // Unless it came back too late: then its replica takes the slots over a
                // second or two after, and both serve them until the old master hears of
                // it. The fault lasts until no failover can follow.
                cluster.wait_until_settled(SETTLED, Duration::from_secs(60));
                (forgets_locks, forgets_fences) = (true, true);
                Injected::lasting(Duration::ZERO)
            }
            (
                Kind::Delay | Kind::Blackhole | Kind::Resets | Kind::DelayOneConnection,
                Servers::Cluster(_, proxies, resetting, _),
            ) => self.proxy_fault(kind, &[&proxies[target]], &mut resetting[target]),
            (kind, Servers::Cluster(cluster, ..)) => self.cluster_fault(kind, cluster.node(target)),
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
        self.injected.push(kind);
        self.active.push(Active {
            kind,
            target,
            t_start,
            heal_at: Instant::now() + injected.lasts,
            forgets_locks,
            forgets_fences,
            mode: injected.mode,
            slots,
            made: injected.made,
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
            t_done: now_ns(),
            step_ms,
            offset_ms,
        });
    }

    /// A fault on the network in front of a server (its proxies); how long it lasts.
    fn proxy_fault(
        &mut self,
        kind: Kind,
        proxies: &[&Proxy],
        resetting: &mut Vec<Resetting>,
    ) -> Injected {
        match kind {
            Kind::Delay => {
                let delay = self.ms(20..700);
                for proxy in proxies {
                    proxy.set_delay(delay);
                }
                Injected::lasting(self.ms(300..1_500))
            }
            Kind::Blackhole => {
                for proxy in proxies {
                    proxy.set_blackhole(true);
                }
                Injected::lasting(self.ms(200..1_200))
            }
            Kind::DelayOneConnection => {
                let pick = self.rng.random_range(0..64);
                let delay = self.ms(20..500);
                // Every other time one of the pool's (the second proxy serves it alone).
                let pooled = proxies.len() > 1 && self.pool_turn;
                self.pool_turn ^= proxies.len() > 1;
                proxies[usize::from(pooled)].delay_one_connection(pick, delay);
                let mode = if pooled { "pool" } else { "" };
                Injected::with_mode(self.ms(300..1_500), mode)
            }
            _ => {
                if self.rng.random_bool(0.5) {
                    for proxy in proxies {
                        proxy.reset();
                    }
                    Injected::lasting(Duration::ZERO)
                } else {
                    for proxy in proxies {
                        resetting.push(proxy.keep_resetting(Duration::from_millis(20)));
                    }
                    Injected::lasting(self.ms(200..1_000))
                }
            }
        }
    }

    /// Takes a right away from the lock user on `server`: its channels, or one command
    /// (drawn among those the server has, recorded as the mode).
    fn acl_fault(&mut self, kind: Kind, server: &RedisServer) -> Injected {
        let lasts = self.ms(200..1_500);
        if kind == Kind::AclChannels {
            return match servers::set_user(server, "resetchannels") {
                Ok(()) => Injected::lasting(lasts),
                Err(e) => Injected::not_made(&e.to_string()),
            };
        }
        let known: Vec<&str> = DENIABLE
            .iter()
            .copied()
            .filter(|c| servers::has_command(server, c))
            .collect();
        if known.is_empty() {
            return Injected::not_made("the server has none of the commands to deny");
        }
        let command = known[self.rng.random_range(0..known.len())];
        match servers::set_user(server, &format!("-{command}")) {
            Ok(()) => Injected::with_mode(lasts, command),
            Err(e) => Injected::not_made(&e.to_string()),
        }
    }

    /// A fault on one master of a cluster; how long it lasts.
    fn cluster_fault(&mut self, kind: Kind, server: &RedisServer) -> Injected {
        match kind {
            // Well below the cluster's node timeout (1 s): no failover. The other masters
            // serve meanwhile, and every lease on them must stay held.
            Kind::FreezeServer => {
                server.signal("STOP");
                Injected::lasting(self.ms(100..500))
            }
            Kind::BusyServer => {
                let busy = self.ms(100..500);
                drop(server.busy_for(busy));
                Injected::lasting(busy)
            }
            Kind::ScriptFlush => {
                let _: Result<(), _> = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query(&mut server.connection());
                Injected::lasting(Duration::ZERO)
            }
            Kind::AclChannels | Kind::AclDeny => self.acl_fault(kind, server),
            _ => {
                let pause = self.ms(100..500);
                let mode = client_pause(server, pause, self.rng.random_bool(0.5));
                Injected::with_mode(pause, mode)
            }
        }
    }

    /// A fault on one server behind its proxies; how long it lasts. A restarted Redlock
    /// master stays down past a lease.
    fn server_fault(&mut self, kind: Kind, node: &mut Node, redlock: bool) -> Injected {
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(1_000);
        match kind {
            Kind::FreezeServer => {
                node.server.signal("STOP");
                Injected::lasting(self.ms(100..1_200))
            }
            Kind::KillRestart => {
                node.server.stop();
                // Redlock's assumption: a restarted master stays down past every lease it
                // may have held, the long-lease actor's too (2 s; a downtime of the
                // plain leases' 300 ms to 900 ms let a second holder take a long lease the
                // restarted master forgot: seeds 5130, 5150 of a Redlock script soak).
                let long_ms = u64::try_from(LONG_TTL.as_millis()).unwrap_or(ttl_ms);
                let longest = ttl_ms.max(long_ms);
                Injected::lasting(if redlock {
                    self.ms(longest + 100..longest + ttl_ms * 3)
                } else {
                    self.ms(0..800)
                })
            }
            Kind::Delay | Kind::Blackhole | Kind::Resets | Kind::DelayOneConnection => {
                let Node {
                    proxy,
                    pool_proxy,
                    resetting,
                    ..
                } = node;
                self.proxy_fault(kind, &[proxy, pool_proxy], resetting)
            }
            Kind::BusyServer => {
                let busy = self.ms(100..1_000);
                drop(node.server.busy_for(busy));
                Injected::lasting(busy)
            }
            Kind::ScriptFlush => {
                let _: Result<(), _> = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query(&mut node.server.connection());
                Injected::lasting(Duration::ZERO)
            }
            Kind::AclChannels | Kind::AclDeny => self.acl_fault(kind, &node.server),
            Kind::ReplaceServer => {
                let lasts = self.ms(300..1_500);
                match node.replace() {
                    Ok(how) => Injected::with_mode(lasts, how),
                    Err(e) => Injected::not_made(&e),
                }
            }
            Kind::Demote => {
                let lasts = self.ms(200..1_500);
                match node.demote() {
                    Ok(()) => Injected::lasting(lasts),
                    Err(e) => Injected::not_made(&e),
                }
            }
            _ => {
                let pause = self.ms(100..1_000);
                let mode = client_pause(&node.server, pause, self.rng.random_bool(0.5));
                Injected::with_mode(pause, mode)
            }
        }
    }

    fn heal(&mut self, servers: &mut Servers, fault: &Active) {
        let target = fault.target;
        match (fault.kind, servers) {
            (Kind::FreezeWorker, _) => {
                signal(self.workers[target], rustix::process::Signal::CONT);
            }
            (Kind::ClockForward | Kind::ClockBack, servers) => {
                self.move_clock(servers, target, 0);
            }
            _ if !fault.made => {}
            (Kind::AclChannels, servers) => {
                self.undo(
                    fault,
                    servers::set_user(servers.server(target), servers::CHANNELS),
                );
            }
            (Kind::AclDeny, servers) => {
                let allowed = format!("+{}", fault.mode);
                self.undo(fault, servers::set_user(servers.server(target), &allowed));
            }
            (Kind::Failover, Servers::Cluster(cluster, proxies, ..)) => {
                // The killed master comes back and rejoins as a replica.
                cluster.node_mut(target).restart();
                servers::grant_native(cluster.node(target));
                cluster.announce_port(target, proxies[target].port());
                // It claims its old slots until it hears of the new epoch.
                cluster.wait_until_settled(SETTLED, Duration::from_secs(60));
            }
            (Kind::FreezeServer, Servers::Cluster(cluster, ..)) => {
                cluster.node(target).signal("CONT");
            }
            (kind, Servers::Cluster(_, proxies, resetting, _)) => {
                heal_proxies(kind, &[&proxies[target]], &mut resetting[target]);
            }
            (_, Servers::One(node)) => self.heal_node(fault, node),
            (_, Servers::Masters(nodes)) => self.heal_node(fault, &mut nodes[target]),
        }
    }

    fn heal_node(&mut self, fault: &Active, node: &mut Node) {
        match fault.kind {
            Kind::FreezeServer => node.server.signal("CONT"),
            Kind::KillRestart => {
                // Without AOF a restart starts empty, as the topology table says; but a
                // full sync as a replica (replace_server put back by replication, demote)
                // leaves the snapshot it received in the server's dir, which the restart
                // would load: fencing counters from before grants made since (a server
                // restored from an old snapshot, which no topology promises against).
                if self.topology != Topology::Aof {
                    let _ = std::fs::remove_file(node.server.dir().join("dump.rdb"));
                }
                node.server.restart();
                servers::grant_native(&node.server);
            }
            Kind::ReplaceServer => {
                let put_back = node.put_back();
                self.undo(fault, put_back);
            }
            Kind::Demote => {
                let promoted = node.promote();
                self.undo(fault, promoted);
            }
            kind => {
                let Node {
                    proxy,
                    pool_proxy,
                    resetting,
                    ..
                } = node;
                heal_proxies(kind, &[proxy, pool_proxy], resetting);
            }
        }
    }

    /// Notes an undo that failed: the run reports it (what follows is not the lock's).
    fn undo<E: std::fmt::Display>(&mut self, fault: &Active, result: Result<(), E>) {
        if let Err(e) = result {
            self.trouble.push(format!(
                "the nemesis could not undo {} on {}: {e}",
                fault.kind.name(),
                target_name(fault.kind, fault.target)
            ));
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

fn heal_proxies(kind: Kind, proxies: &[&Proxy], resetting: &mut Vec<Resetting>) {
    for proxy in proxies {
        match kind {
            Kind::Delay => proxy.set_delay(Duration::ZERO),
            Kind::Blackhole => proxy.set_blackhole(false),
            Kind::DelayOneConnection => {
                proxy.delay_one_connection(0, Duration::ZERO);
            }
            _ => {}
        }
    }
    if kind == Kind::Resets {
        resetting.clear();
    }
}

/// `CLIENT PAUSE` for `pause`, every command (`all`) or writes only; the mode.
fn client_pause(server: &RedisServer, pause: Duration, all: bool) -> &'static str {
    let mode = if all { "ALL" } else { "WRITE" };
    let _: Result<(), _> = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(u64::try_from(pause.as_millis()).unwrap_or(1_000))
        .arg(mode)
        .query(&mut server.connection());
    mode
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, sig);
    }
}
