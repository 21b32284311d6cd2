//! A private Redis Cluster for one test, modelled on redis-rs's `redis-test/src/cluster.rs`.
//!
//! [`RedisCluster::start`] runs `masters * (1 + replicas_per_master)` [`RedisServer`]s with
//! cluster mode on, joins them with `redis-cli --cluster create`, and waits until every node
//! reports `cluster_state:ok`, agrees on who owns every slot, and every replica's link to its
//! master is up. Each node keeps its own temp dir (its `nodes.conf` lands there, so a node's id
//! and role survive [`RedisServer::restart`]); every node is killed when the cluster is dropped.
//!
//! The nodes run with:
//!
//! - `--cluster-node-timeout 1000` ([`NODE_TIMEOUT`]): a stopped master is flagged as failing
//!   after about a second, and one of its replicas is promoted a second or two later;
//! - `--cluster-replica-validity-factor 0`: a replica always tries to fail over, however long
//!   it has been out of touch with its master;
//! - `--cluster-allow-replica-migration no`: replicas stay with the master `redis-cli` gave them;
//! - `--repl-diskless-sync no` and `--rdb-del-sync-files yes`: a full sync goes through an RDB
//!   file in the master's temp dir, deleted once sent. (With Redis 7.0's default diskless sync,
//!   the master first waits 5 s for more replicas, and after the transfer it holds every write
//!   for that replica back until the replica's first `REPLCONF ACK`, up to a second later, while
//!   the replica already reports `master_link_status:up`: a master killed in that second takes
//!   those writes with it. With a disk-based sync the stream flows as soon as the link is up.)
//! - no persistence (the single-server harness's defaults: `--save ''`, `--appendonly no`).
//!
//! Both ports of a node, its client port and its cluster bus port (`port + 10000`), are free
//! loopback ports below 65536; neither is ever 6379 or 16379.
//!
//! ```no_run
//! use lockscript_test::cluster::RedisCluster;
//!
//! let mut cluster = RedisCluster::start(3, 1);
//! let mut con = cluster.connection();
//! redis::cmd("SET").arg("x").arg("1").exec(&mut con).unwrap();
//!
//! let master = cluster.master_for_key("x");
//! cluster.node_mut(master).stop();
//! cluster.wait_until_ok(std::time::Duration::from_secs(30)); // a replica took over
//! assert_ne!(cluster.master_for_key("x"), master);
//! ```

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::{self, Read, Seek};
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redis::IntoConnectionInfo;
use redis::cluster::{ClusterClient, ClusterClientBuilder};

use crate::server::{RedisServer, ServerBuilder};

/// The nodes' `--cluster-node-timeout`: how long a node may be unreachable before the others
/// flag it as failing (and, for a master, one of its replicas starts a failover).
pub const NODE_TIMEOUT: Duration = Duration::from_secs(1);
/// How many hash slots a Redis Cluster has.
pub const SLOT_COUNT: u16 = 16384;

/// The cluster bus port is the client port plus this.
const BUS_PORT_OFFSET: u16 = 10000;
/// Ports a developer's own redis (client and bus) most likely uses; never handed out.
const RESERVED_PORTS: [u16; 2] = [6379, 16379];
/// Environment variable that overrides the `redis-cli` binary to run.
const CLI_ENV: &str = "REDIS_CLI_BIN";
/// Binary run when [`CLI_ENV`] is not set.
const DEFAULT_CLI: &str = "redis-cli";
/// How long `redis-cli --cluster create` may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a new cluster may take to settle after `redis-cli` is done.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between two polls.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// A node that does not accept a connection (and answer its setup) within this is down.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long [`RedisCluster::connection`] / [`RedisCluster::async_connection`] keep retrying.
const CONNECT_RETRY: Duration = Duration::from_secs(5);
/// Lines of each node's log put in panic messages.
const LOG_TAIL_LINES: usize = 30;

/// A private Redis Cluster for one test: `masters` masters with `replicas_per_master`
/// replicas each, all on loopback.
///
/// Nodes are addressed by their index in [`RedisCluster::nodes`] (the order they were given to
/// `redis-cli --cluster create`; which of them became masters is up to `redis-cli`: ask
/// [`RedisCluster::masters`]). Every node is killed (SIGKILL) when the cluster is dropped.
#[derive(Debug)]
pub struct RedisCluster {
    /// The nodes, in `redis-cli --cluster create` order.
    nodes: Vec<RedisServer>,
    /// `CLUSTER MYID` of each node (kept in its `nodes.conf`, so stable across restarts).
    ids: Vec<String>,
}

impl RedisCluster {
    /// Starts `masters * (1 + replicas_per_master)` nodes, creates the cluster with
    /// `redis-cli --cluster create ... --cluster-replicas <replicas_per_master> --cluster-yes`
    /// and waits (up to 30 s) until it is ready; see [`RedisCluster::wait_until_ok`].
    ///
    /// # Panics
    ///
    /// If `masters < 3` (`redis-cli` refuses to create smaller clusters), a node cannot start,
    /// `redis-cli` is missing (set `REDIS_CLI_BIN` to use another binary), fails or hangs, or the
    /// cluster does not become ready in time. The message includes `redis-cli`'s output and the
    /// tail of every node's log.
    #[must_use]
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        Self::start_with(masters, replicas_per_master, |_, node| node)
    }

    /// [`start`](Self::start), with each node's builder (node `i` in `redis-cli --cluster
    /// create` order) passed through `node` first: e.g. to run it under libfaketime.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    ///
    /// ```no_run
    /// # use lockscript_test::cluster::RedisCluster;
    /// let cluster = RedisCluster::start_with(3, 1, |i, node| {
    ///     node.env("FAKETIME_TIMESTAMP_FILE", format!("/tmp/clock-{i}"))
    /// });
    /// ```
    #[must_use]
    pub fn start_with(
        masters: usize,
        replicas_per_master: usize,
        node: impl Fn(usize, ServerBuilder) -> ServerBuilder,
    ) -> RedisCluster {
        assert!(
            masters >= 3,
            "a Redis Cluster needs at least 3 masters (redis-cli refuses fewer), not {masters}"
        );
        let count = masters * (1 + replicas_per_master);
        let nodes: Vec<RedisServer> = (0..count)
            .map(|i| node(i, node_builder()).start())
            .collect();
        let ids = nodes
            .iter()
            .map(|node| {
                probe_connection(node)
                    .and_then(|mut con| redis::cmd("CLUSTER").arg("MYID").query::<String>(&mut con))
                    .unwrap_or_else(|e| panic!("CLUSTER MYID on port {}: {e}", node.port()))
            })
            .collect();
        let cluster = RedisCluster { nodes, ids };
        cluster.create(replicas_per_master);
        cluster.wait_until_ok(SETTLE_TIMEOUT);
        cluster
    }

    /// All nodes, masters and replicas, in `redis-cli --cluster create` order.
    #[must_use]
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `i`.
    #[must_use]
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// Node `i`, e.g. to [`RedisServer::stop`], [`RedisServer::restart`] or
    /// [`RedisServer::signal`] it. A restarted node rejoins the cluster with its old id (its
    /// `nodes.conf` is kept); a former master comes back as a replica of the node that
    /// replaced it.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// Node `i`'s cluster node id (`CLUSTER MYID`).
    #[must_use]
    pub fn node_id(&self, i: usize) -> &str {
        &self.ids[i]
    }

    /// The index of the node whose cluster node id is `id`, if it is one of ours.
    #[must_use]
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|known| known == id)
    }

    /// Every node's URL, `redis://127.0.0.1:{port}/`, in node order.
    #[must_use]
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// A [`ClusterClientBuilder`] seeded with every node's URL, to tune retries or timeouts.
    #[must_use]
    pub fn client_builder(&self) -> ClusterClientBuilder {
        ClusterClient::builder(self.urls())
    }

    /// A [`ClusterClient`] seeded with every node's URL and redis-rs's defaults.
    #[must_use]
    pub fn client(&self) -> ClusterClient {
        self.client_builder()
            .build()
            .unwrap_or_else(|e| panic!("cannot build a cluster client for {:?}: {e}", self.urls()))
    }

    /// An async cluster connection (needs a tokio runtime) from [`RedisCluster::client`],
    /// retrying for a few seconds while no node can be reached.
    ///
    /// With redis 1.8's defaults it has no response timeout: a request for a dead master's
    /// slots is retried (up to 16 times, with backoff) until a replica has taken over, a few
    /// seconds here.
    ///
    /// # Panics
    ///
    /// If no connection could be made; the message includes the nodes' logs.
    pub async fn async_connection(&self) -> redis::cluster_async::ClusterConnection {
        let client = self.client();
        let deadline = Instant::now() + CONNECT_RETRY;
        loop {
            match client.get_async_connection().await {
                Ok(con) => return con,
                Err(_) if Instant::now() < deadline => tokio::time::sleep(POLL_INTERVAL).await,
                Err(e) => panic!(
                    "cannot open an async cluster connection to {:?}: {e}\n{}",
                    self.urls(),
                    self.logs()
                ),
            }
        }
    }

    /// A synchronous cluster connection from [`RedisCluster::client`], retrying for a few
    /// seconds while no node can be reached.
    ///
    /// With redis 1.8, a sync cluster connection does not survive the death of a master it has
    /// talked to: requests for that master's slots keep failing with "Connection refused" (it
    /// retries the dead address and never refreshes its slot map on that error), even after a
    /// replica took over. Open a new one after a failover. The async connection recovers.
    ///
    /// # Panics
    ///
    /// If no connection could be made; the message includes the nodes' logs.
    #[must_use]
    pub fn connection(&self) -> redis::cluster::ClusterConnection {
        let client = self.client();
        let deadline = Instant::now() + CONNECT_RETRY;
        loop {
            match client.get_connection() {
                Ok(con) => return con,
                Err(_) if Instant::now() < deadline => thread::sleep(POLL_INTERVAL),
                Err(e) => panic!(
                    "cannot open a cluster connection to {:?}: {e}\n{}",
                    self.urls(),
                    self.logs()
                ),
            }
        }
    }

    /// The index of the node serving `key`'s slot as master, as the first live node (in node
    /// order) sees it in `CLUSTER NODES`. While a failover is under way that view may be stale
    /// (or name a stopped node); call [`RedisCluster::wait_until_ok`] first for a settled answer.
    ///
    /// # Panics
    ///
    /// If no node answers, or the slot's owner is unknown or not one of ours.
    #[must_use]
    pub fn master_for_key(&self, key: &str) -> usize {
        let slot = key_slot(key);
        let (seen_by, view) = self.first_live_view();
        let owner = view
            .iter()
            .find(|node| node.slots.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot)))
            .unwrap_or_else(|| {
                panic!("node {seen_by} knows no owner of slot {slot} (key {key:?})")
            });
        self.index_of(&owner.id).unwrap_or_else(|| {
            panic!(
                "slot {slot} (key {key:?}) is owned by {}, not one of our nodes",
                owner.id
            )
        })
    }

    /// One lock name per master, `<prefix>-<i>` for the smallest `i` that lands there,
    /// with the master owning its key (`lock:{name}`, the default prefix), in master
    /// order.
    ///
    /// # Panics
    ///
    /// As [`master_for_key`](Self::master_for_key), or if 10,000 names leave a master out.
    #[must_use]
    pub fn one_lock_name_per_master(&self, prefix: &str) -> Vec<(String, usize)> {
        let masters = self.masters();
        let mut found: std::collections::BTreeMap<usize, String> =
            std::collections::BTreeMap::new();
        for i in 0..10_000 {
            let name = format!("{prefix}-{i}");
            found
                .entry(self.master_for_key(&format!("lock:{{{name}}}")))
                .or_insert(name);
            if found.len() == masters.len() {
                return found.into_iter().map(|(m, n)| (n, m)).collect();
            }
        }
        panic!("no name per master for {masters:?}: {found:?}");
    }

    /// Makes node `i` announce `port` as its client port (its cluster bus port stays the
    /// real one), e.g. a proxy's in front of it, and waits until every live node's
    /// `CLUSTER NODES` says so: cluster clients, which connect to the addresses the
    /// cluster announces, then reach node `i` through that port. The setting is not kept
    /// across a restart of the node: announce again after one.
    ///
    /// # Panics
    ///
    /// If the node refuses the setting, or the others do not learn of it within 30 s.
    pub fn announce_port(&self, i: usize, port: u16) {
        let node = self.node(i);
        let mut conn = node.connection();
        for (option, value) in [
            ("cluster-announce-bus-port", node.port() + 10_000),
            ("cluster-announce-port", port),
        ] {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(option)
                .arg(value)
                .query(&mut conn)
                .unwrap_or_else(|e| panic!("node {i}: CONFIG SET {option} {value}: {e}"));
        }
        let id = self.node_id(i).to_owned();
        let wanted = format!(":{port}@");
        let start = Instant::now();
        for j in 0..self.nodes.len() {
            if !self.node(j).is_running() {
                continue;
            }
            let mut conn = self.node(j).connection();
            loop {
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut conn)
                    .unwrap_or_default();
                let seen = nodes
                    .lines()
                    .find(|l| l.starts_with(&id))
                    .is_some_and(|l| l.contains(&wanted));
                if seen {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "node {j} does not see node {i} at port {port}: {nodes}"
                );
                thread::sleep(POLL_INTERVAL);
            }
        }
    }

    /// Puts a fault proxy ([`crate::proxy::Proxy`]) in front of every node, each node
    /// announcing its proxy's port (see [`announce_port`](Self::announce_port)): cluster
    /// clients then reach every node through its proxy. The proxies, by node index.
    ///
    /// ```no_run
    /// let cluster = lockscript_test::cluster::RedisCluster::start(3, 0);
    /// let proxies = cluster.behind_proxies();
    /// let urls: Vec<String> = proxies.iter().map(|p| p.url()).collect();
    /// ```
    #[must_use]
    pub fn behind_proxies(&self) -> Vec<crate::proxy::Proxy> {
        let proxies: Vec<crate::proxy::Proxy> = (self.nodes.iter())
            .map(|node| crate::proxy::Proxy::start(node.port()))
            .collect();
        for (i, proxy) in proxies.iter().enumerate() {
            self.announce_port(i, proxy.port());
        }
        proxies
    }

    /// The hash slot ranges (inclusive) node `i` serves as master, as it sees itself in
    /// `CLUSTER NODES`: empty for a replica, or for a node that does not answer (stopped,
    /// frozen).
    ///
    /// ```no_run
    /// let cluster = lockscript_test::cluster::RedisCluster::start(3, 0);
    /// let served: u32 = (0..3)
    ///     .flat_map(|i| cluster.slots_of(i))
    ///     .map(|(lo, hi)| u32::from(hi - lo) + 1)
    ///     .sum();
    /// assert_eq!(served, 16384);
    /// ```
    #[must_use]
    pub fn slots_of(&self, i: usize) -> Vec<(u16, u16)> {
        self.own_view_of(i)
            .map(|view| view.slots)
            .unwrap_or_default()
    }

    /// The indexes of the live nodes that currently report themselves as masters, ascending.
    #[must_use]
    pub fn masters(&self) -> Vec<usize> {
        self.live_where(|view| view.master)
    }

    /// The indexes of the live nodes that currently report themselves as replicas, ascending.
    #[must_use]
    pub fn replicas(&self) -> Vec<usize> {
        self.live_where(|view| view.replica)
    }

    /// Polls until the cluster is settled: every live node (one that answers within 500 ms; a
    /// stopped or SIGSTOPped node does not) reports `cluster_state:ok`,
    /// `cluster_slots_assigned:16384` and knows every node; all live nodes agree on which node
    /// owns each of the 16384 slots, and each owner is live; and every live replica reports
    /// `master_link_status:up`.
    ///
    /// Right after a master is stopped, the others still believe in it for up to
    /// [`NODE_TIMEOUT`]; since its slots must be owned by a live node, this waits for the
    /// failover to complete.
    ///
    /// # Panics
    ///
    /// If the cluster is not settled within `timeout`; the message says what was still wrong
    /// and includes the tail of every node's log.
    pub fn wait_until_ok(&self, timeout: Duration) {
        let start = Instant::now();
        loop {
            let Err(reason) = self.check() else { return };
            assert!(
                start.elapsed() < timeout,
                "redis cluster not ok after {timeout:?}: {reason}\n{}",
                self.logs()
            );
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Polls until the cluster has stayed settled for `quiet`: what [`Self::wait_until_ok`]
    /// waits for, no live node flagged as failing (`fail?` or `fail`) in any live node's
    /// view, and the same slot owners throughout.
    ///
    /// A master that was down for a moment can still lose its slots after
    /// `wait_until_ok` passes: a failure report made while it was down leads its replica to
    /// an election a second or two later, and until the old master hears of the new epoch
    /// both accept writes for those slots. A failover only starts from a `fail` flag, and a
    /// flag only appears after [`NODE_TIMEOUT`] without an answer, so `quiet` should be at
    /// least twice that.
    ///
    /// # Panics
    ///
    /// If the cluster has not stayed settled for `quiet` within `timeout`.
    pub fn wait_until_settled(&self, quiet: Duration, timeout: Duration) {
        let start = Instant::now();
        let mut calm: Option<(Instant, SlotOwners)> = None;
        loop {
            let reason = match self.check() {
                Ok(view) if !view.flagged.is_empty() => {
                    format!("nodes {:?} are flagged as failing", view.flagged)
                }
                Ok(view) => match &calm {
                    Some((since, owners)) if *owners == view.owners => {
                        if since.elapsed() >= quiet {
                            return;
                        }
                        String::new()
                    }
                    _ => {
                        calm = Some((Instant::now(), view.owners));
                        String::new()
                    }
                },
                Err(reason) => reason,
            };
            if !reason.is_empty() {
                calm = None;
            }
            assert!(
                start.elapsed() < timeout,
                "redis cluster not settled for {quiet:?} within {timeout:?}: {reason}\n{}",
                self.logs()
            );
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Empties every node's script cache and zeroes its counters.
    pub fn flush_scripts_and_reset_stats(&self) {
        for node in &self.nodes {
            crate::flush_scripts_and_reset_stats(&mut node.connection());
        }
    }

    /// The tail of every node's log, for panic messages.
    #[must_use]
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let log = node.log();
            let lines: Vec<&str> = log.lines().collect();
            let skipped = lines.len().saturating_sub(LOG_TAIL_LINES);
            let _ = writeln!(
                out,
                "--- node {i} (port {}, id {}) log, last {} of {} lines ---",
                node.port(),
                self.ids[i],
                lines.len() - skipped,
                lines.len()
            );
            for line in &lines[skipped..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Runs `redis-cli --cluster create` over every node.
    fn create(&self, replicas_per_master: usize) {
        let bin = std::env::var_os(CLI_ENV).unwrap_or_else(|| OsString::from(DEFAULT_CLI));
        let mut output = tempfile::tempfile()
            .unwrap_or_else(|e| panic!("cannot create a temp file for redis-cli's output: {e}"));
        let output_err = output
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot duplicate a file handle: {e}"));
        let mut command = Command::new(&bin);
        command.args(["--cluster", "create"]);
        for node in &self.nodes {
            command.arg(format!("127.0.0.1:{}", node.port()));
        }
        command
            .arg("--cluster-replicas")
            .arg(replicas_per_master.to_string())
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .stdout(output_err.try_clone().expect("a file handle"))
            .stderr(output_err);
        let shown = format!("{command:?}");
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == io::ErrorKind::NotFound => panic!(
                "redis-cli not found ({}: {e}): install it with `apt-get install -y redis-tools` \
                 (Debian/Ubuntu) or `brew install redis`, or set {CLI_ENV}",
                Path::new(&bin).display()
            ),
            Err(e) => panic!("cannot spawn {}: {e}", Path::new(&bin).display()),
        };
        let deadline = Instant::now() + CREATE_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(POLL_INTERVAL),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Err(e) => panic!("cannot poll redis-cli: {e}"),
            }
        };
        if status.is_some_and(|s| s.success()) {
            return;
        }
        let mut text = String::new();
        let _ = output.rewind();
        let _ = output.read_to_string(&mut text);
        let outcome = status.map_or_else(
            || format!("did not finish within {CREATE_TIMEOUT:?}"),
            |s| format!("failed ({s})"),
        );
        panic!(
            "{shown} {outcome}:\n--- redis-cli output ---\n{text}\n{}",
            self.logs()
        );
    }

    /// `Ok` when the cluster is settled (see [`RedisCluster::wait_until_ok`]), else what is
    /// still wrong.
    fn check(&self) -> Result<View, String> {
        // Probed in parallel, so a frozen node (which costs a PROBE_TIMEOUT) does not make the
        // other views stale.
        let probes: Vec<Probe> = thread::scope(|scope| {
            let handles: Vec<_> = (0..self.nodes.len())
                .map(|i| scope.spawn(move || self.probe(i)))
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().expect("a probe thread panicked"))
                .collect()
        });
        let mut views: Vec<(usize, NodeState)> = Vec::new();
        for (i, probe) in probes.into_iter().enumerate() {
            match probe {
                Probe::Down => {}
                Probe::Failed(e) => return Err(format!("node {i}: {e}")),
                Probe::Up(state) => views.push((i, state)),
            }
        }
        let live: BTreeSet<usize> = views.iter().map(|(i, _)| *i).collect();
        let Some((first, first_state)) = views.first() else {
            return Err("no node is up".into());
        };
        let reference = slot_map(&first_state.nodes);
        for (i, state) in &views {
            let field = |name: &str| info_field(&state.cluster_info, name).unwrap_or("?");
            if field("cluster_state") != "ok" {
                return Err(format!(
                    "node {i} reports cluster_state:{}",
                    field("cluster_state")
                ));
            }
            if field("cluster_slots_assigned") != SLOT_COUNT.to_string() {
                return Err(format!(
                    "node {i} reports cluster_slots_assigned:{}",
                    field("cluster_slots_assigned")
                ));
            }
            if field("cluster_known_nodes") != self.nodes.len().to_string() {
                return Err(format!(
                    "node {i} reports cluster_known_nodes:{} (of {})",
                    field("cluster_known_nodes"),
                    self.nodes.len()
                ));
            }
            let map = slot_map(&state.nodes);
            if map != reference {
                return Err(format!(
                    "nodes {first} and {i} disagree on slot owners: {reference:?} vs {map:?}"
                ));
            }
            if info_field(&state.replication, "role") == Some("slave") {
                let link = info_field(&state.replication, "master_link_status").unwrap_or("?");
                if link != "up" {
                    return Err(format!("replica {i} reports master_link_status:{link}"));
                }
            }
        }
        let mut next = 0_u32;
        for (lo, hi, owner) in &reference {
            if u32::from(*lo) != next {
                return Err(format!("node {first} sees no owner of slot {next}"));
            }
            next = u32::from(*hi) + 1;
            match self.index_of(owner) {
                Some(o) if live.contains(&o) => {}
                Some(o) => return Err(format!("slots {lo}-{hi} are owned by node {o}, down")),
                None => return Err(format!("slots {lo}-{hi} are owned by unknown node {owner}")),
            }
        }
        if next != u32::from(SLOT_COUNT) {
            return Err(format!("node {first} sees no owner of slot {next}"));
        }
        let mut flagged: Vec<usize> = views
            .iter()
            .flat_map(|(_, state)| &state.nodes)
            .filter(|line| line.flags.iter().any(|f| f == "fail" || f == "fail?"))
            .filter_map(|line| self.index_of(&line.id))
            .filter(|i| live.contains(i))
            .collect();
        flagged.sort_unstable();
        flagged.dedup();
        Ok(View {
            owners: reference,
            flagged,
        })
    }

    /// Node `i`'s state.
    fn probe(&self, i: usize) -> Probe {
        let Ok(mut con) = probe_connection(&self.nodes[i]) else {
            return Probe::Down;
        };
        let replies: Result<(String, String, String), _> = redis::pipe()
            .cmd("CLUSTER")
            .arg("INFO")
            .cmd("CLUSTER")
            .arg("NODES")
            .cmd("INFO")
            .arg("replication")
            .query(&mut con);
        match replies {
            Ok((cluster_info, nodes, replication)) => Probe::Up(NodeState {
                cluster_info,
                nodes: parse_cluster_nodes(&nodes),
                replication,
            }),
            // A frozen (SIGSTOPped) node accepts the connection (the kernel does) but never
            // answers; one that dies meanwhile drops it.
            Err(e) if e.is_timeout() || e.is_io_error() => Probe::Down,
            Err(e) => Probe::Failed(e),
        }
    }

    /// Node `i`'s `CLUSTER NODES`, parsed; `None` if it is down or the query fails.
    fn cluster_nodes(&self, i: usize) -> Option<Vec<NodeLine>> {
        let mut con = probe_connection(&self.nodes[i]).ok()?;
        let text: String = redis::cmd("CLUSTER").arg("NODES").query(&mut con).ok()?;
        Some(parse_cluster_nodes(&text))
    }

    /// The `CLUSTER NODES` view of the first live node, and its index.
    fn first_live_view(&self) -> (usize, Vec<NodeLine>) {
        (0..self.nodes.len())
            .find_map(|i| self.cluster_nodes(i).map(|view| (i, view)))
            .unwrap_or_else(|| panic!("no cluster node answers CLUSTER NODES\n{}", self.logs()))
    }

    /// What node `i` says of itself; `None` if it does not answer.
    fn own_view_of(&self, i: usize) -> Option<OwnView> {
        own_view(&mut probe_connection(&self.nodes[i]).ok()?)
    }

    /// Live nodes whose own view of themselves (`myself` in `CLUSTER NODES`) `holds`.
    fn live_where(&self, holds: impl Fn(&OwnView) -> bool) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.own_view_of(i).is_some_and(|view| holds(&view)))
            .collect()
    }
}

/// A plain connection to `node` for the harness's own queries; fails if the node does not
/// accept one or answer `PING` within [`PROBE_TIMEOUT`] each (a frozen node's kernel accepts
/// the connection, so only the `PING` tells). Replies are awaited for at most as long. It skips
/// redis-rs's `CLIENT SETINFO` handshake, which Redis 7.0 rejects (`ERR unknown subcommand`,
/// counted in `INFO errorstats`), so the harness's polling adds nothing there.
fn probe_connection(node: &RedisServer) -> redis::RedisResult<redis::Connection> {
    probe_url(&node.url())
}

/// [`probe_connection`] to a node's URL, for a thread that cannot borrow the cluster.
///
/// # Errors
///
/// If the node does not accept a connection or answer `PING` within 500 ms.
///
/// ```no_run
/// let cluster = lockscript_test::cluster::RedisCluster::start(3, 1);
/// let mut con = lockscript_test::cluster::probe_url(&cluster.urls()[0]).unwrap();
/// assert!(lockscript_test::cluster::own_view(&mut con).unwrap().master);
/// ```
pub fn probe_url(url: &str) -> redis::RedisResult<redis::Connection> {
    let info = url.into_connection_info()?;
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let mut con = redis::Client::open(info.set_redis_settings(settings))?
        .get_connection_with_timeout(PROBE_TIMEOUT)?;
    con.set_read_timeout(Some(PROBE_TIMEOUT))?;
    con.set_write_timeout(Some(PROBE_TIMEOUT))?;
    // Before any pipeline: redis-rs reads every reply of a pipeline even after one timed out.
    redis::cmd("PING").exec(&mut con)?;
    Ok(con)
}

/// What a node says of itself (its `myself` line of `CLUSTER NODES`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnView {
    /// Whether it is a master.
    pub master: bool,
    /// Whether it is a replica (a node may be neither while it joins).
    pub replica: bool,
    /// The slot ranges it serves as a master (inclusive).
    pub slots: Vec<(u16, u16)>,
}

/// What the node behind `con` says of itself; `None` if it does not answer (within the
/// connection's read timeout) or has no `myself` line.
///
/// ```no_run
/// let cluster = lockscript_test::cluster::RedisCluster::start(3, 1);
/// let mut con = lockscript_test::cluster::probe_url(&cluster.urls()[0]).unwrap();
/// let view = lockscript_test::cluster::own_view(&mut con).unwrap();
/// assert!(view.master && !view.slots.is_empty());
/// ```
pub fn own_view(con: &mut redis::Connection) -> Option<OwnView> {
    let text: String = redis::cmd("CLUSTER").arg("NODES").query(con).ok()?;
    parse_cluster_nodes(&text)
        .into_iter()
        .find(|node| node.flags.iter().any(|f| f == "myself"))
        .map(|node| OwnView {
            master: node.flags.iter().any(|f| f == "master"),
            replica: node.flags.iter().any(|f| f == "slave"),
            slots: node.slots,
        })
}

/// The hash slot of `key` (CRC16/XMODEM of the key, or of its `{hash tag}`, mod 16384), as
/// `CLUSTER KEYSLOT` computes it.
#[must_use]
pub fn key_slot(key: impl AsRef<[u8]>) -> u16 {
    let key = key.as_ref();
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16_xmodem(hashed) % SLOT_COUNT
}

/// CRC16/XMODEM, the checksum Redis Cluster hashes with (`lockscript inspect` routes a
/// lock name to its primary with the same function).
use lockscript_audit::inspect::crc16 as crc16_xmodem;

/// The outcome of asking one node about the cluster.
enum Probe {
    /// No connection or no answer within [`PROBE_TIMEOUT`]: stopped or frozen.
    Down,
    /// It answered with an error (e.g. `-LOADING`).
    Failed(redis::RedisError),
    /// What it says.
    Up(NodeState),
}

/// What one node says about the cluster.
struct NodeState {
    /// `CLUSTER INFO`.
    cluster_info: String,
    /// `CLUSTER NODES`, parsed.
    nodes: Vec<NodeLine>,
    /// `INFO replication`.
    replication: String,
}

/// Slot ranges (first, last) and their owners' ids.
type SlotOwners = Vec<(u16, u16, String)>;

/// What a settled cluster looks like from its live nodes.
struct View {
    /// Slot ranges and their owners' ids.
    owners: SlotOwners,
    /// Live nodes some live node flags as failing (`fail?` or `fail`).
    flagged: Vec<usize>,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug)]
struct NodeLine {
    /// The node id.
    id: String,
    /// `myself`, `master`, `slave`, `fail?`, `fail`, ...
    flags: Vec<String>,
    /// Slot ranges it serves as master (inclusive; importing/migrating markers skipped).
    slots: Vec<(u16, u16)>,
}

/// Parses `CLUSTER NODES` output; malformed lines are skipped.
fn parse_cluster_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let slots = fields[8..]
                .iter()
                .filter(|f| !f.starts_with('['))
                .filter_map(|f| match f.split_once('-') {
                    Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
                    None => f.parse().ok().map(|s| (s, s)),
                })
                .collect();
            Some(NodeLine {
                id: fields[0].to_owned(),
                flags: fields[2].split(',').map(str::to_owned).collect(),
                slots,
            })
        })
        .collect()
}

/// Slot ranges and their owners' ids, sorted by slot, adjacent ranges of one owner merged.
fn slot_map(nodes: &[NodeLine]) -> Vec<(u16, u16, String)> {
    let mut ranges: Vec<(u16, u16, &str)> = nodes
        .iter()
        .flat_map(|node| {
            node.slots
                .iter()
                .map(|&(lo, hi)| (lo, hi, node.id.as_str()))
        })
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(u16, u16, String)> = Vec::new();
    for (lo, hi, id) in ranges {
        match merged.last_mut() {
            Some(last) if last.2 == id && u32::from(last.1) + 1 == u32::from(lo) => last.1 = hi,
            _ => merged.push((lo, hi, id.to_owned())),
        }
    }
    merged
}

/// The value of `name:` in an `INFO`-style reply.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// A single-server builder with the cluster options this module documents.
fn node_builder() -> ServerBuilder {
    RedisServer::builder()
        .port_filter(bus_port_free)
        .arg("--cluster-enabled")
        .arg("yes")
        .arg("--cluster-config-file")
        .arg("nodes.conf")
        .arg("--cluster-node-timeout")
        .arg(NODE_TIMEOUT.as_millis().to_string())
        .arg("--cluster-replica-validity-factor")
        .arg("0")
        .arg("--cluster-allow-replica-migration")
        .arg("no")
        .arg("--repl-diskless-sync")
        .arg("no")
        .arg("--rdb-del-sync-files")
        .arg("yes")
}

/// Whether `port` may host a cluster node: neither it nor its bus port is reserved, and the bus
/// port (`port + 10000`) exists and is free right now.
fn bus_port_free(port: u16) -> bool {
    port.checked_add(BUS_PORT_OFFSET).is_some_and(|bus| {
        !RESERVED_PORTS.contains(&port)
            && !RESERVED_PORTS.contains(&bus)
            && TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_slot_matches_redis_rs() {
        for key in [
            "",
            "x",
            "foo",
            "{user1000}.following",
            "{}x",
            "a{b}c{d}",
            "{",
            "}{",
        ] {
            let slot = redis::cluster_routing::Slot::new(key_slot(key));
            assert_eq!(
                slot,
                Some(redis::cluster_routing::Slot::for_key(key)),
                "{key:?}"
            );
        }
        // The reference value from the Redis Cluster specification.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
    }

    #[test]
    fn parses_cluster_nodes() {
        let text = "\
a 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 [5461->-b]
b 127.0.0.1:30002@40002 master - 0 0 2 connected 5461-10922
c 127.0.0.1:30003@40003 master,fail - 0 0 3 disconnected
d 127.0.0.1:30004@40004 slave b 0 0 2 connected
e 127.0.0.1:30005@40005 master - 0 0 4 connected 10923 10924-16383
";
        let nodes = parse_cluster_nodes(text);
        assert_eq!(nodes.len(), 5);
        assert_eq!(nodes[0].slots, vec![(0, 5460)]);
        assert_eq!(nodes[2].flags, vec!["master", "fail"]);
        assert_eq!(
            slot_map(&nodes),
            vec![
                (0, 5460, "a".to_owned()),
                (5461, 10922, "b".to_owned()),
                (10923, 16383, "e".to_owned()),
            ]
        );
    }

    #[test]
    fn bus_port_filter_rejects_high_and_reserved_ports() {
        assert!(!bus_port_free(55536));
        assert!(!bus_port_free(6379));
        assert!(!bus_port_free(16379));
    }
}
