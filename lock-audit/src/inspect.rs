//! `lockscript inspect`: who holds a lock, for how much longer, with which fencing token,
//! and who is waiting, read from a live server (one server, or every primary of a Redis
//! Cluster) with read-only commands.
//!
//! What it reads, per lock name (under the key prefix, `lock:` by default), all keys in
//! one hash slot: the lock key (the exclusive holder's owner token) and its `PTTL`, the
//! fencing counter and its `PTTL`, the waiter queue (`:queue`, tickets by arrival on the
//! server's clock) with each ticket's deadline (`:alive`), the shared holders (`:holders`,
//! readers or permits by the end of their lease) with their fencing tokens (`:fences`),
//! and the server's `TIME`, in one pipeline. Names are found with `SCAN ... MATCH ...
//! COUNT` (never `KEYS`), or read directly when one name is given. An owner token is never
//! printed: a short digest of it (the first 8 hex digits of its SHA1) tells holders and
//! waiters apart.
//!
//! The commands, for a read-only ACL user: `+scan +get +pttl +zrange +zcard +hgetall
//! +time`, and on a Cluster `+cluster|slots`.
//!
//! [`state`] turns what was read into a [`LockState`] without I/O (unit-tested here);
//! [`inspect`] does the reading.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

/// How many waiters of one lock are listed (all are counted).
pub const MAX_WAITERS_LISTED: usize = 100;

/// What `inspect` looks at.
#[derive(Debug, Clone)]
pub struct Options {
    /// The key prefix of the lock handles (`Locks::key_prefix`), `lock:` by default.
    pub prefix: String,
    /// One lock name, or a glob over names (`orders:*`); every lock when `None`.
    pub pattern: Option<String>,
    /// The `COUNT` of each `SCAN` call.
    pub scan_count: usize,
    /// At most this many locks are read; the report says when there were more.
    pub max_locks: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            prefix: "lock:".to_owned(),
            pattern: None,
            scan_count: 1000,
            max_locks: 1000,
        }
    }
}

/// What kind of lock a name holds, as far as its keys tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A plain lock: the lock key and its fencing counter, nobody queued on the server.
    Lock,
    /// A fair lock, or the write side of a read/write lock with no reader seen: waiters
    /// queued on the server, all exclusive.
    Fair,
    /// A read/write lock: readers hold or wait.
    ReadWrite,
    /// A semaphore: permits are held or awaited.
    Semaphore,
}

impl Kind {
    /// The name the table and the JSON use.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Fair => "fair",
            Kind::ReadWrite => "read/write",
            Kind::Semaphore => "semaphore",
        }
    }
}

/// What a holder or a waiter holds or asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The lock, or the write side of a read/write lock.
    Exclusive,
    /// The read side of a read/write lock.
    Read,
    /// A permit of a semaphore.
    Permit,
}

impl Grant {
    fn from_code(code: &str) -> Option<Self> {
        match code {
            "x" => Some(Grant::Exclusive),
            "r" => Some(Grant::Read),
            "p" => Some(Grant::Permit),
            _ => None,
        }
    }

    /// The name the table and the JSON use.
    pub fn as_str(self) -> &'static str {
        match self {
            Grant::Exclusive => "exclusive",
            Grant::Read => "read",
            Grant::Permit => "permit",
        }
    }
}

/// One holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The first 8 hex digits of the SHA1 of its owner token (never the token).
    pub owner: String,
    /// What it holds.
    pub grant: Grant,
    /// Its fencing token, when the server has it.
    pub fence: Option<u64>,
    /// What is left of its lease on the server, in milliseconds.
    pub lease_left_ms: i64,
}

/// One waiter queued on the server (fair locks, read/write locks, semaphores).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// The first 8 hex digits of the SHA1 of its owner token.
    pub owner: String,
    /// What it waits for.
    pub grant: Grant,
    /// How long it has been queued, in milliseconds of the server's clock.
    pub waiting_ms: i64,
    /// Whether its process renewed its ticket in time (a dead waiter is skipped by the
    /// next call of any waiter).
    pub alive: bool,
    /// When its ticket lapses unless renewed, in milliseconds from now (negative: lapsed).
    pub deadline_in_ms: i64,
}

/// The fencing counter of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The last fencing token given.
    pub value: u64,
    /// When the counter expires, in milliseconds from now (`None`: it does not).
    pub expires_in_ms: Option<i64>,
}

/// One lock as the server holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    /// Its name (without prefix or braces).
    pub name: String,
    /// The server it lives on (`host:port`).
    pub node: String,
    /// What kind of lock it is.
    pub kind: Kind,
    /// Its holders: one exclusive, or readers, or permits.
    pub holders: Vec<Holder>,
    /// Its fencing counter, if it has one.
    pub fence: Option<Fence>,
    /// Its waiters in line, first first (at most [`MAX_WAITERS_LISTED`]).
    pub waiters: Vec<Waiter>,
    /// How many wait in all.
    pub waiters_total: usize,
}

/// What one pipeline read for one name.
#[derive(Debug, Clone, Default)]
pub struct Raw {
    /// `GET lock:{name}`.
    pub owner: Option<String>,
    /// `PTTL lock:{name}`.
    pub owner_pttl: i64,
    /// `GET lock:{name}:fence`.
    pub fence: Option<String>,
    /// `PTTL lock:{name}:fence`.
    pub fence_pttl: i64,
    /// `ZRANGE lock:{name}:queue 0 99 WITHSCORES`: ticket, arrival in µs.
    pub queue: Vec<(String, f64)>,
    /// `ZCARD lock:{name}:queue`.
    pub queue_len: usize,
    /// `ZRANGE lock:{name}:alive 0 -1 WITHSCORES`: ticket, deadline in ms.
    pub alive: Vec<(String, f64)>,
    /// `ZRANGE lock:{name}:holders 0 -1 WITHSCORES`: token, lease end in ms.
    pub holders: Vec<(String, f64)>,
    /// `HGETALL lock:{name}:fences`: token → fence, and `~kind`.
    pub fences: HashMap<String, String>,
    /// `TIME`, in µs.
    pub now_us: i64,
}

/// The short digest that stands for an owner token.
pub fn owner_digest(token: &str) -> String {
    let mut hex = crate::sha1_hex(token.as_bytes());
    hex.truncate(8);
    hex
}

/// A score of a sorted set (milliseconds or microseconds of the server's clock) as an
/// integer: scores are whole numbers well within `i64`.
#[allow(clippy::cast_possible_truncation)]
fn whole(score: f64) -> i64 {
    score as i64
}

/// What `raw` says about lock `name` on `node`; `None` when nothing of it is left.
pub fn state(name: &str, node: &str, raw: &Raw) -> Option<LockState> {
    let now_ms = raw.now_us / 1000;
    let mut holders = Vec::new();
    let fence = raw.fence.as_deref().and_then(|f| f.parse::<u64>().ok());
    if let Some(owner) = &raw.owner {
        // Nothing is granted while the exclusive holder holds, so the counter is its token.
        holders.push(Holder {
            owner: owner_digest(owner),
            grant: Grant::Exclusive,
            fence,
            lease_left_ms: raw.owner_pttl.max(0),
        });
    }
    let shared = raw
        .fences
        .get("~kind")
        .and_then(|k| Grant::from_code(k))
        .unwrap_or(Grant::Read);
    for (token, ends) in &raw.holders {
        let left = whole(*ends) - now_ms;
        if left <= 0 {
            continue; // expired; the next call of any holder drops it
        }
        holders.push(Holder {
            owner: owner_digest(token),
            grant: shared,
            fence: raw.fences.get(token).and_then(|f| f.parse().ok()),
            lease_left_ms: left,
        });
    }
    let deadlines: HashMap<&str, f64> = raw.alive.iter().map(|(t, d)| (t.as_str(), *d)).collect();
    let waiters: Vec<Waiter> = raw
        .queue
        .iter()
        .map(|(ticket, arrived_us)| {
            // '<token> <claim_ms> <kind> <channel>'
            let mut parts = ticket.split(' ');
            let token = parts.next().unwrap_or_default();
            let grant = parts
                .nth(1)
                .and_then(Grant::from_code)
                .unwrap_or(Grant::Exclusive);
            let deadline = deadlines.get(ticket.as_str()).map_or(0, |d| whole(*d));
            Waiter {
                owner: owner_digest(token),
                grant,
                waiting_ms: (raw.now_us - whole(*arrived_us)).max(0) / 1000,
                alive: deadline > now_ms,
                deadline_in_ms: deadline - now_ms,
            }
        })
        .collect();
    let fence = fence.map(|value| Fence {
        value,
        expires_in_ms: (raw.fence_pttl >= 0).then_some(raw.fence_pttl),
    });
    if holders.is_empty() && waiters.is_empty() && fence.is_none() {
        return None;
    }
    let grants = holders
        .iter()
        .map(|h| h.grant)
        .chain(waiters.iter().map(|w| w.grant));
    let mut kind = if raw.queue_len > 0 {
        Kind::Fair
    } else {
        Kind::Lock
    };
    for grant in grants.chain(raw.fences.get("~kind").and_then(|k| Grant::from_code(k))) {
        match grant {
            Grant::Read => kind = Kind::ReadWrite,
            Grant::Permit => kind = Kind::Semaphore,
            Grant::Exclusive => {}
        }
    }
    Some(LockState {
        name: name.to_owned(),
        node: node.to_owned(),
        kind,
        holders,
        fence,
        waiters,
        waiters_total: raw.queue_len,
    })
}

/// What `inspect` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Whether the server is a Redis Cluster (then every primary was read).
    pub cluster: bool,
    /// The servers read (`host:port`).
    pub nodes: Vec<String>,
    /// The locks, by name.
    pub locks: Vec<LockState>,
    /// Whether more locks matched than `max_locks`.
    pub truncated: bool,
}

/// The CRC16 (XMODEM) of `bytes`, as Redis Cluster maps keys to slots.
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The Cluster slot of every key of lock `name` (they share the hash tag `{name}`).
pub fn slot(name: &str) -> u16 {
    crc16(name.as_bytes()) % 16384
}

/// The name of lock whose key (or one of its keys) is `key`, under `prefix`.
pub fn name_of<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('{')?;
    let end = rest.find('}')?;
    let name = &rest[..end];
    let tail = &rest[end + 1..];
    let ours = ["", ":fence", ":queue", ":alive", ":holders", ":fences"];
    (!name.is_empty() && ours.contains(&tail)).then_some(name)
}

/// `text` with Redis's glob characters escaped, so it matches itself only.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whether `pattern` is a glob rather than one name.
pub fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

/// `url` with its host and port replaced (user, password, database and scheme kept).
pub fn with_address(url: &str, host: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
    let (auth, after) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let path = after.find(['/', '?']).map_or("", |i| &after[i..]);
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    format!("{scheme}://{auth}{host}:{port}{path}")
}

/// A server of the report: its address and a connection to it.
struct Node {
    address: String,
    conn: redis::Connection,
    /// The slots it serves (Cluster), inclusive ranges.
    slots: Vec<(u16, u16)>,
}

fn open(url: &str) -> Result<redis::Connection, String> {
    let client = redis::Client::open(url).map_err(|e| format!("bad URL {url}: {e}"))?;
    let conn = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .map_err(|e| format!("cannot reach {url}: {e}"))?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .and_then(|()| conn.set_write_timeout(Some(Duration::from_secs(5))))
        .map_err(|e| format!("cannot set timeouts on {url}: {e}"))?;
    Ok(conn)
}

/// A primary of a Cluster: host, port, and the slot ranges it serves.
type Primary = (String, u16, Vec<(u16, u16)>);

/// The servers to read: the one at `url`, or every primary of its Cluster.
fn nodes(url: &str) -> Result<(bool, Vec<Node>), String> {
    let mut conn = open(url)?;
    let slots: redis::RedisResult<redis::Value> =
        redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn);
    // Not a Cluster (or no permission to ask): read this server alone.
    let Ok(redis::Value::Array(ranges)) = slots else {
        let node = Node {
            address: address_of(url),
            conn,
            slots: Vec::new(),
        };
        return Ok((false, vec![node]));
    };
    let mut by_address: Vec<Primary> = Vec::new();
    for range in ranges {
        let redis::Value::Array(fields) = range else {
            continue;
        };
        let (Some(start), Some(end), Some(redis::Value::Array(primary))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let start: i64 = redis::from_redis_value_ref(start).map_err(|e| e.to_string())?;
        let end: i64 = redis::from_redis_value_ref(end).map_err(|e| e.to_string())?;
        let host: String = primary
            .first()
            .and_then(|h| redis::from_redis_value_ref(h).ok())
            .ok_or("CLUSTER SLOTS: a primary without a host")?;
        let port: i64 = primary
            .get(1)
            .and_then(|p| redis::from_redis_value_ref(p).ok())
            .ok_or("CLUSTER SLOTS: a primary without a port")?;
        let port = u16::try_from(port).map_err(|_| format!("CLUSTER SLOTS: port {port}"))?;
        let slot = |n: i64| u16::try_from(n).map_err(|_| format!("CLUSTER SLOTS: slot {n}"));
        let range = (slot(start)?, slot(end)?);
        match by_address
            .iter_mut()
            .find(|(h, p, _)| *h == host && *p == port)
        {
            Some((_, _, ranges)) => ranges.push(range),
            None => by_address.push((host, port, vec![range])),
        }
    }
    let mut nodes = Vec::new();
    for (host, port, slots) in by_address {
        let conn = open(&with_address(url, &host, port))?;
        nodes.push(Node {
            address: format!("{host}:{port}"),
            conn,
            slots,
        });
    }
    Ok((true, nodes))
}

/// `host:port` of `url`, for the report.
fn address_of(url: &str) -> String {
    if let Some((scheme, path)) = url.split_once("://")
        && scheme.contains("unix")
    {
        return path.split('?').next().unwrap_or(path).to_owned();
    }
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let after = rest.rfind('@').map_or(rest, |at| &rest[at + 1..]);
    let end = after.find(['/', '?']).unwrap_or(after.len());
    after[..end].to_owned()
}

/// Reads lock `name` from `conn` in one pipeline.
fn read(conn: &mut redis::Connection, prefix: &str, name: &str) -> Result<Raw, String> {
    let lock = format!("{prefix}{{{name}}}");
    let key = |suffix: &str| format!("{lock}{suffix}");
    let mut pipe = redis::pipe();
    pipe.cmd("GET").arg(&lock);
    pipe.cmd("PTTL").arg(&lock);
    pipe.cmd("GET").arg(key(":fence"));
    pipe.cmd("PTTL").arg(key(":fence"));
    pipe.cmd("ZRANGE")
        .arg(key(":queue"))
        .arg(0)
        .arg(MAX_WAITERS_LISTED - 1)
        .arg("WITHSCORES");
    pipe.cmd("ZCARD").arg(key(":queue"));
    pipe.cmd("ZRANGE")
        .arg(key(":alive"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES");
    pipe.cmd("ZRANGE")
        .arg(key(":holders"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES");
    pipe.cmd("HGETALL").arg(key(":fences"));
    pipe.cmd("TIME");
    let values: Vec<redis::Value> = pipe
        .query(conn)
        .map_err(|e| format!("reading lock `{name}`: {e}"))?;
    let at = |i: usize| {
        values
            .get(i)
            .ok_or_else(|| format!("reading lock `{name}`: short reply"))
    };
    let parse_err = |e: redis::ParsingError| format!("reading lock `{name}`: {e}");
    let scored = |v: &redis::Value| -> Result<Vec<(String, f64)>, String> {
        // RESP2 answers a flat list, member then score.
        let flat: Vec<String> = redis::from_redis_value_ref(v).map_err(parse_err)?;
        Ok(flat
            .chunks(2)
            .filter_map(|pair| match pair {
                [member, score] => Some((member.clone(), score.parse().ok()?)),
                _ => None,
            })
            .collect())
    };
    let time: Vec<String> = redis::from_redis_value_ref(at(9)?).map_err(parse_err)?;
    let secs: i64 = time.first().and_then(|s| s.parse().ok()).unwrap_or(0);
    let micros: i64 = time.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok(Raw {
        owner: redis::from_redis_value_ref(at(0)?).map_err(parse_err)?,
        owner_pttl: redis::from_redis_value_ref(at(1)?).map_err(parse_err)?,
        fence: redis::from_redis_value_ref(at(2)?).map_err(parse_err)?,
        fence_pttl: redis::from_redis_value_ref(at(3)?).map_err(parse_err)?,
        queue: scored(at(4)?)?,
        queue_len: redis::from_redis_value_ref(at(5)?).map_err(parse_err)?,
        alive: scored(at(6)?)?,
        holders: scored(at(7)?)?,
        fences: redis::from_redis_value_ref(at(8)?).map_err(parse_err)?,
        now_us: secs * 1_000_000 + micros,
    })
}

/// Lock names on `conn` whose name matches `glob`, at most `max` (and whether there were
/// more).
fn scan(
    conn: &mut redis::Connection,
    prefix: &str,
    glob: &str,
    count: usize,
    max: usize,
    names: &mut Vec<String>,
) -> Result<bool, String> {
    let pattern = format!("{}{{{glob}}}*", glob_escape(prefix));
    let mut cursor = String::from("0");
    loop {
        let (next, keys): (String, Vec<String>) = redis::cmd("SCAN")
            .arg(&cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(count)
            .query(conn)
            .map_err(|e| format!("SCAN: {e}"))?;
        for key in &keys {
            if let Some(name) = name_of(prefix, key)
                && !names.iter().any(|n| n == name)
            {
                if names.len() == max {
                    return Ok(true);
                }
                names.push(name.to_owned());
            }
        }
        if next == "0" {
            return Ok(false);
        }
        cursor = next;
    }
}

/// Reads the locks `options` asks for from the server at `url` (every primary of a
/// Cluster), with read-only commands.
///
/// # Errors
///
/// A message saying what failed: the URL, the connection, a command refused (an ACL
/// without one of the commands above), a reply that is not what a lock leaves.
pub fn inspect(url: &str, options: &Options) -> Result<Report, String> {
    let (cluster, mut nodes) = nodes(url)?;
    let mut locks = Vec::new();
    let mut truncated = false;
    match options.pattern.as_deref() {
        Some(name) if !is_glob(name) => {
            let slot = slot(name);
            let node = nodes
                .iter_mut()
                .find(|n| {
                    n.slots.is_empty() || n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
                })
                .ok_or_else(|| format!("no primary serves slot {slot} of lock `{name}`"))?;
            let raw = read(&mut node.conn, &options.prefix, name)?;
            locks.extend(state(name, &node.address, &raw));
        }
        pattern => {
            let glob = pattern.unwrap_or("*");
            for node in &mut nodes {
                let mut names = Vec::new();
                let room = options.max_locks.saturating_sub(locks.len());
                truncated |= scan(
                    &mut node.conn,
                    &options.prefix,
                    glob,
                    options.scan_count,
                    room,
                    &mut names,
                )?;
                names.sort();
                for name in names {
                    let raw = read(&mut node.conn, &options.prefix, &name)?;
                    locks.extend(state(&name, &node.address, &raw));
                }
            }
            locks.sort_by(|a, b| a.name.cmp(&b.name));
        }
    }
    Ok(Report {
        cluster,
        nodes: nodes.into_iter().map(|n| n.address).collect(),
        locks,
        truncated,
    })
}

/// Milliseconds as the table shows them: `1.25 s`, `3 m 20 s`, `2 h 5 m`.
pub fn duration(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let ms = ms.unsigned_abs();
    if ms < 60_000 {
        format!("{sign}{:.2} s", Duration::from_millis(ms).as_secs_f64())
    } else if ms < 3_600_000 {
        format!("{sign}{} m {} s", ms / 60_000, ms % 60_000 / 1000)
    } else {
        format!("{sign}{} h {} m", ms / 3_600_000, ms % 3_600_000 / 60_000)
    }
}

/// The report as a table, a lock per block.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let servers = if report.cluster {
        format!("a Cluster of {} primaries", report.nodes.len())
    } else {
        report.nodes.join(", ")
    };
    let _ = writeln!(out, "{} lock(s) on {servers}", report.locks.len());
    for lock in &report.locks {
        let _ = write!(out, "\n{}  {}", lock.name, lock.kind.as_str());
        if report.cluster {
            let _ = write!(out, "  on {}", lock.node);
        }
        match &lock.fence {
            Some(Fence {
                value,
                expires_in_ms: Some(ms),
            }) => {
                let _ = write!(
                    out,
                    "  fence counter {value} (expires in {})",
                    duration(*ms)
                );
            }
            Some(Fence {
                value,
                expires_in_ms: None,
            }) => {
                let _ = write!(out, "  fence counter {value} (no expiry)");
            }
            None => {}
        }
        let _ = writeln!(out);
        if lock.holders.is_empty() {
            let _ = writeln!(out, "  free");
        }
        for h in &lock.holders {
            let fence = h.fence.map_or_else(|| "-".to_owned(), |f| f.to_string());
            let _ = writeln!(
                out,
                "  holder  {}  {:<9}  fence {fence}  lease left {}",
                h.owner,
                h.grant.as_str(),
                duration(h.lease_left_ms)
            );
        }
        for w in &lock.waiters {
            let _ = writeln!(
                out,
                "  waiter  {}  {:<9}  waiting {}  {}",
                w.owner,
                w.grant.as_str(),
                duration(w.waiting_ms),
                if w.alive {
                    format!("alive (renews within {})", duration(w.deadline_in_ms))
                } else {
                    "dead (its process stopped renewing; skipped by the next call)".to_owned()
                }
            );
        }
        if lock.waiters_total > lock.waiters.len() {
            let _ = writeln!(
                out,
                "  ... {} more waiting",
                lock.waiters_total - lock.waiters.len()
            );
        }
    }
    if report.truncated {
        let _ = writeln!(
            out,
            "\n(more locks matched; narrow the pattern or raise --max)"
        );
    }
    out
}

/// The report as JSON (`lockscript inspect --json`):
///
/// ```text
/// {"cluster": false, "nodes": ["127.0.0.1:6379"], "truncated": false,
///  "locks": [{"name": "orders:42", "node": "127.0.0.1:6379", "kind": "lock",
///             "fence": {"value": 1795409146655323, "expires_in_ms": 3599120},
///             "holders": [{"owner": "3f2a9c1d", "grant": "exclusive",
///                          "fence": 1795409146655323, "lease_left_ms": 29120}],
///             "waiters": [{"owner": "9f00aa11", "grant": "exclusive", "waiting_ms": 1300,
///                          "alive": true, "deadline_in_ms": 900}],
///             "waiters_total": 1}]}
/// ```
///
/// `kind` is `lock`, `fair`, `read/write` or `semaphore`; `grant` is `exclusive`, `read`
/// or `permit`; `fence` is `null` for a lock without a counter, `expires_in_ms` `null` for
/// a counter without expiry; `owner` is the first 8 hex digits of the SHA1 of the owner
/// token, never the token.
pub fn json(report: &Report) -> serde_json::Value {
    use serde_json::json;
    let locks: Vec<serde_json::Value> = report
        .locks
        .iter()
        .map(|lock| {
            json!({
                "name": lock.name,
                "node": lock.node,
                "kind": lock.kind.as_str(),
                "fence": lock.fence.as_ref().map(|f| json!({
                    "value": f.value,
                    "expires_in_ms": f.expires_in_ms,
                })),
                "holders": lock.holders.iter().map(|h| json!({
                    "owner": h.owner,
                    "grant": h.grant.as_str(),
                    "fence": h.fence,
                    "lease_left_ms": h.lease_left_ms,
                })).collect::<Vec<_>>(),
                "waiters": lock.waiters.iter().map(|w| json!({
                    "owner": w.owner,
                    "grant": w.grant.as_str(),
                    "waiting_ms": w.waiting_ms,
                    "alive": w.alive,
                    "deadline_in_ms": w.deadline_in_ms,
                })).collect::<Vec<_>>(),
                "waiters_total": lock.waiters_total,
            })
        })
        .collect();
    json!({
        "cluster": report.cluster,
        "nodes": report.nodes,
        "truncated": report.truncated,
        "locks": locks,
    })
}

#[cfg(test)]
#[allow(clippy::cast_precision_loss)]
mod tests {
    use super::*;

    fn raw() -> Raw {
        Raw {
            now_us: 1_000_000_000,
            owner_pttl: -2,
            fence_pttl: -2,
            ..Raw::default()
        }
    }

    #[test]
    fn crc16_is_the_clusters() {
        // The check value of CRC16/XMODEM, as the Redis Cluster specification gives it.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
    }

    #[test]
    fn names_come_from_any_key_of_a_lock_and_nothing_else() {
        assert_eq!(name_of("lock:", "lock:{orders:42}"), Some("orders:42"));
        assert_eq!(
            name_of("lock:", "lock:{orders:42}:fence"),
            Some("orders:42")
        );
        assert_eq!(name_of("lock:", "lock:{a}:queue"), Some("a"));
        assert_eq!(name_of("lock:", "lock:{a}:other"), None);
        assert_eq!(name_of("lock:", "other:{a}"), None);
        assert_eq!(name_of("lock:", "lock:{}"), None);
    }

    #[test]
    fn a_held_lock_shows_its_holder_digest_fence_and_lease() {
        let mut r = raw();
        r.owner = Some("00ff".to_owned());
        r.owner_pttl = 2500;
        r.fence = Some("17".to_owned());
        r.fence_pttl = 3_600_000;
        let s = state("a", "h:1", &r).unwrap();
        assert_eq!(s.kind, Kind::Lock);
        assert_eq!(s.holders.len(), 1);
        assert_eq!(s.holders[0].owner, owner_digest("00ff"));
        assert_ne!(s.holders[0].owner, "00ff");
        assert_eq!(s.holders[0].fence, Some(17));
        assert_eq!(s.holders[0].lease_left_ms, 2500);
        assert_eq!(
            s.fence,
            Some(Fence {
                value: 17,
                expires_in_ms: Some(3_600_000)
            })
        );
    }

    #[test]
    fn readers_waiters_and_dead_tickets_are_told_apart() {
        let mut r = raw();
        let now_ms = r.now_us / 1000;
        r.holders = vec![
            ("aa".to_owned(), (now_ms + 900) as f64),
            ("bb".to_owned(), (now_ms - 5) as f64),
        ];
        r.fences = HashMap::from([
            ("aa".to_owned(), "5".to_owned()),
            ("~kind".to_owned(), "r".to_owned()),
        ]);
        r.queue = vec![
            ("cc 300 x chan".to_owned(), (r.now_us - 2_000_000) as f64),
            ("dd 300 r chan".to_owned(), (r.now_us - 1_000_000) as f64),
        ];
        r.queue_len = 2;
        r.alive = vec![
            ("cc 300 x chan".to_owned(), (now_ms + 400) as f64),
            ("dd 300 r chan".to_owned(), (now_ms - 1) as f64),
        ];
        let s = state("rw", "h:1", &r).unwrap();
        assert_eq!(s.kind, Kind::ReadWrite);
        assert_eq!(s.holders.len(), 1, "the expired reader is not shown");
        assert_eq!(s.holders[0].grant, Grant::Read);
        assert_eq!(s.holders[0].fence, Some(5));
        assert_eq!(s.holders[0].lease_left_ms, 900);
        assert_eq!(s.waiters.len(), 2);
        assert_eq!(s.waiters[0].grant, Grant::Exclusive);
        assert_eq!(s.waiters[0].waiting_ms, 2000);
        assert!(s.waiters[0].alive);
        assert!(!s.waiters[1].alive);
        assert_eq!(s.waiters[1].grant, Grant::Read);
    }

    #[test]
    fn permits_make_a_semaphore_and_a_queue_alone_a_fair_lock() {
        let mut r = raw();
        r.fences = HashMap::from([("~kind".to_owned(), "p".to_owned())]);
        r.holders = vec![("aa".to_owned(), (r.now_us / 1000 + 10) as f64)];
        assert_eq!(state("s", "h", &r).unwrap().kind, Kind::Semaphore);
        let mut r = raw();
        r.owner = Some("aa".to_owned());
        r.queue = vec![("bb 300 x c".to_owned(), r.now_us as f64)];
        r.queue_len = 1;
        assert_eq!(state("f", "h", &r).unwrap().kind, Kind::Fair);
        assert!(state("gone", "h", &raw()).is_none());
    }

    #[test]
    fn addresses_keep_the_rest_of_the_url() {
        assert_eq!(
            with_address("redis://u:p@h:1/2", "x", 7),
            "redis://u:p@x:7/2"
        );
        assert_eq!(with_address("rediss://h:1", "::1", 7), "rediss://[::1]:7");
        assert_eq!(address_of("redis://u:p@h:1/2"), "h:1");
        assert_eq!(address_of("redis+unix:///tmp/r.sock"), "/tmp/r.sock");
    }
}
