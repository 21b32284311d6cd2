//! [`ClusterConnection`]: the lock's own Redis Cluster connection. One multiplexed
//! connection per primary, each made when a call first needs it; a command goes to the
//! primary of its first key's slot ([`crate::machine::slots`]). What it adds over
//! redis-rs's cluster connection is that **a primary's trouble stays its own**: when a
//! primary drops its connections, restarts or stops answering, the slots are read again
//! in the background while calls to the other primaries go on, where redis-rs's
//! connection holds every call to every node while it refreshes its slots and reconnects
//! (which, against a node that accepts connections but does not answer, lasts until its
//! connection timeout, again and again: every lease on every primary was lost).
//!
//! Nothing is re-sent that may have run: an I/O error or a missing reply is the
//! caller's to judge. A `MOVED` reply (which proves the command did not run) moves its
//! slot at once and the command goes to the named primary; an `ASK` sends it there once
//! after `ASKING`.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, FutureExt, Shared};
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, ConnectionAddr, ConnectionInfo, Pipeline, RedisError, RedisFuture, Value};

use crate::LockError;
use crate::machine::slots::{self, Redirect, Spread, Topology};

/// How long making a connection to one node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one node may take to answer `CLUSTER SLOTS`.
const SLOTS_TIMEOUT: Duration = Duration::from_secs(1);
/// The least time between two readings of the slots (a burst of redirections or
/// errors asks once).
const REFRESH_GAP: Duration = Duration::from_millis(100);
/// How many redirections one command follows.
const REDIRECTS: usize = 3;

/// A Redis Cluster connection that routes each command to the primary of its key's slot,
/// keeps a connection per primary, and never lets one primary's trouble hold the calls
/// to the others. Cheap to clone (clones share the connections).
///
/// [`Locks::connect_cluster`](crate::Locks::connect_cluster) makes one; make your own to
/// run your scripts (or any keyed command) on the same terms. A command with no key goes
/// to any primary, but for loading or flushing scripts and function libraries (to every
/// primary, each of which must accept it) and `INFO` (every primary's, by address); a
/// pipeline's keyed commands must share one slot.
///
/// ```no_run
/// # async fn demo() -> Result<(), lockscript::LockError> {
/// let nodes = ["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"];
/// let mut conn = lockscript::ClusterConnection::connect(nodes).await?;
/// let value: Option<String> = redis::cmd("GET").arg("{orders:42}:state").query_async(&mut conn).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ClusterConnection {
    inner: Arc<Inner>,
}

impl fmt::Debug for ClusterConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterConnection")
            .field("primaries", &locked(&self.inner.topology).primaries())
            .finish_non_exhaustive()
    }
}

struct Inner {
    /// What every node's connection copies: the first seed's credentials, TLS and
    /// protocol.
    template: ConnectionInfo,
    /// The addresses given, asked for the slots when no known primary answers.
    seeds: Vec<String>,
    topology: Mutex<Topology>,
    nodes: Mutex<HashMap<String, Entry>>,
    refresh: Mutex<Refresh>,
    ids: AtomicU64,
}

/// A node's connection, made or being made (every caller shares the one attempt).
enum Entry {
    Ready {
        id: u64,
        conn: MultiplexedConnection,
    },
    Connecting {
        id: u64,
        attempt: Shared<BoxFuture<'static, Result<MultiplexedConnection, RedisError>>>,
    },
}

/// The background reading of the slots: at most one at a time.
#[derive(Default)]
struct Refresh {
    running: bool,
    /// Asked for again while one ran.
    again: bool,
    last: Option<Instant>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ClusterConnection {
    /// Reads the cluster's slots from the first of `nodes` to answer and returns the
    /// connection. Credentials and TLS go in the URLs (`rediss://user:password@host:port`);
    /// every node is reached with the first URL's.
    ///
    /// [`LockError::InvalidSettings`] if `nodes` is empty or an address does not parse;
    /// [`LockError::Connect`] if no node answered with the cluster's slots within 5 s.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockscript::LockError> {
    /// let conn = lockscript::ClusterConnection::connect(["redis://127.0.0.1:7000/"]).await?;
    /// let locks = lockscript::Locks::new(conn);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect<T: redis::IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<Self, LockError> {
        let infos = nodes
            .into_iter()
            .map(redis::IntoConnectionInfo::into_connection_info)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| LockError::InvalidSettings(format!("a cluster node's address: {e}")))?;
        let Some(template) = infos.first().cloned() else {
            return Err(LockError::InvalidSettings(
                "connect_cluster needs at least one node address".to_owned(),
            ));
        };
        let mut seeds = Vec::new();
        for info in &infos {
            let (host, port) = match info.addr() {
                ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                    (host.clone(), *port)
                }
                other => {
                    return Err(LockError::InvalidSettings(format!(
                        "a cluster node is reached over TCP, not {other}"
                    )));
                }
            };
            seeds.push(slots::address(&host, port));
        }
        let conn = Self {
            inner: Arc::new(Inner {
                template,
                seeds,
                topology: Mutex::default(),
                nodes: Mutex::default(),
                refresh: Mutex::default(),
                ids: AtomicU64::new(0),
            }),
        };
        let read = tokio::time::timeout(Duration::from_secs(5), conn.inner.read_slots()).await;
        match read {
            Ok(Ok(topology)) => {
                *locked(&conn.inner.topology) = topology;
                Ok(conn)
            }
            Ok(Err(source)) => Err(conn.inner.unreachable(source)),
            Err(_) => Err(conn.inner.unreachable(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no node answered with the cluster's slots within 5s",
            )))),
        }
    }

    /// Sends `cmd` to every primary at once; their answers by address (a map, as
    /// redis-rs's cluster connection answers a command routed to all primaries), or the
    /// first error.
    pub(crate) async fn every_primary(&self, cmd: &Cmd) -> Result<Value, RedisError> {
        let primaries = locked(&self.inner.topology).primaries();
        let asks = primaries.into_iter().map(|addr| async move {
            let (_, mut conn) = self.inner.node(&addr).await?;
            let answer = conn.req_packed_command(cmd).await?;
            Ok::<_, RedisError>((Value::BulkString(addr.into_bytes()), answer))
        });
        let answers = futures_util::future::try_join_all(asks).await?;
        Ok(Value::Map(answers))
    }

    /// Where `slot`'s commands go; when no primary is known for it, the slots are read
    /// again and the error says to retry.
    fn primary(&self, slot: Option<u16>) -> Result<String, RedisError> {
        let topology = locked(&self.inner.topology);
        let found = if let Some(slot) = slot {
            topology.primary(slot).map(str::to_owned)
        } else {
            // A keyless command: the primaries in turn.
            let primaries = topology.primaries();
            let pick = self.inner.ids.fetch_add(1, Ordering::Relaxed);
            usize::try_from(pick)
                .ok()
                .and_then(|i| primaries.get(i % primaries.len().max(1)).cloned())
        };
        drop(topology);
        found.ok_or_else(|| {
            Arc::clone(&self.inner).refresh_soon();
            slots::unserved(slot.unwrap_or_default())
        })
    }

    /// Sends what `send` sends to the primary of `slot`, following redirections and
    /// reading the slots again after any trouble.
    async fn route<T>(
        &self,
        slot: Option<u16>,
        send: impl Fn(MultiplexedConnection, bool) -> BoxFuture<'static, Result<T, RedisError>>,
        redirect_of: impl Fn(&Result<T, RedisError>) -> Option<Redirect>,
    ) -> Result<T, RedisError> {
        let mut to = self.primary(slot)?;
        let mut asking = false;
        for _ in 0..REDIRECTS {
            let (id, conn) = match self.inner.node(&to).await {
                Ok(made) => made,
                Err(e) => {
                    Arc::clone(&self.inner).refresh_soon();
                    return Err(e);
                }
            };
            let waiting = Unanswered::new(&self.inner);
            let reply = send(conn, asking).await;
            waiting.answered();
            match redirect_of(&reply) {
                Some(Redirect::Moved { slot, to: there }) => {
                    locked(&self.inner.topology).moved(slot, &there);
                    Arc::clone(&self.inner).refresh_soon();
                    (to, asking) = (there, false);
                }
                Some(Redirect::Ask { to: there, .. }) => (to, asking) = (there, true),
                None => {
                    if let Err(e) = &reply
                        && !matches!(e.kind(), redis::ErrorKind::Server(_))
                    {
                        // The connection is broken or the node unreachable: made again
                        // by the next call that needs it; the slots may have moved.
                        self.inner.forget(&to, id);
                        Arc::clone(&self.inner).refresh_soon();
                    }
                    return reply;
                }
            }
        }
        // Still redirected: the last answer stands (it proves the command did not run).
        let (_, conn) = self.inner.node(&to).await?;
        send(conn, asking).await
    }
}

/// A command on its way: dropped before its reply came (the caller's response timeout
/// passed), the slots are read again, so that a primary that stopped answering, and was
/// replaced since, is not asked forever (it sends no `MOVED`, and no error either when
/// its host is gone without a word).
/// A call dropped sooner than [`UNANSWERED_AFTER`] (cancelled by its caller, rather than
/// left without a reply) says nothing of its primary.
struct Unanswered(Option<(Arc<Inner>, Instant)>);

/// How long a call must have waited for its reply before its drop reads the slots again.
const UNANSWERED_AFTER: Duration = Duration::from_millis(10);

impl Unanswered {
    fn new(inner: &Arc<Inner>) -> Self {
        Self(Some((Arc::clone(inner), Instant::now())))
    }

    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some((inner, sent)) = self.0.take()
            && sent.elapsed() >= UNANSWERED_AFTER
        {
            inner.refresh_soon();
        }
    }
}

impl Inner {
    /// The connection to node `addr` (and its entry's id), made if there is none.
    async fn node(&self, addr: &str) -> Result<(u64, MultiplexedConnection), RedisError> {
        let (id, attempt) = {
            let mut nodes = locked(&self.nodes);
            match nodes.get(addr) {
                Some(Entry::Ready { id, conn }) => return Ok((*id, conn.clone())),
                Some(Entry::Connecting { id, attempt }) => (*id, attempt.clone()),
                None => {
                    let id = self.ids.fetch_add(1, Ordering::Relaxed);
                    let attempt = connect(self.info(addr)?).boxed().shared();
                    let entry = Entry::Connecting {
                        id,
                        attempt: attempt.clone(),
                    };
                    nodes.insert(addr.to_owned(), entry);
                    (id, attempt)
                }
            }
        };
        let made = attempt.await;
        let mut nodes = locked(&self.nodes);
        let ours = matches!(nodes.get(addr), Some(Entry::Connecting { id: i, .. }) if *i == id);
        match made {
            Ok(conn) => {
                if ours {
                    let ready = Entry::Ready {
                        id,
                        conn: conn.clone(),
                    };
                    nodes.insert(addr.to_owned(), ready);
                }
                Ok((id, conn))
            }
            Err(e) => {
                if ours {
                    nodes.remove(addr);
                }
                Err(e)
            }
        }
    }

    /// Drops node `addr`'s connection `id` (not one made since).
    fn forget(&self, addr: &str, id: u64) {
        let mut nodes = locked(&self.nodes);
        let current = match nodes.get(addr) {
            Some(Entry::Ready { id, .. } | Entry::Connecting { id, .. }) => Some(*id),
            None => None,
        };
        if current == Some(id) {
            nodes.remove(addr);
        }
    }

    /// How to reach node `addr`: the first seed's settings at that address.
    fn info(&self, addr: &str) -> Result<ConnectionInfo, RedisError> {
        let (host, port) = slots::host_port(addr).ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::Client,
                "a cluster node address that does not parse",
                addr.to_owned(),
            ))
        })?;
        let at = match self.template.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        Ok(self.template.clone().set_addr(at))
    }

    /// Asks every known primary and every seed for the slots at once; the first
    /// usable answer.
    async fn read_slots(&self) -> Result<Topology, RedisError> {
        let mut asked = locked(&self.topology).primaries();
        for seed in &self.seeds {
            if !asked.contains(seed) {
                asked.push(seed.clone());
            }
        }
        let mut answers: FuturesUnordered<_> = asked
            .into_iter()
            .map(|addr| async move {
                let ask = async {
                    let (id, mut conn) = self.node(&addr).await?;
                    let answer = conn
                        .req_packed_command(&redis::cmd("CLUSTER").arg("SLOTS").clone())
                        .await;
                    if answer.is_err() {
                        self.forget(&addr, id);
                    }
                    answer
                };
                let answer = tokio::time::timeout(SLOTS_TIMEOUT, ask).await;
                let answer = answer.unwrap_or_else(|_| {
                    Err(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("{addr} did not answer CLUSTER SLOTS within {SLOTS_TIMEOUT:?}"),
                    )))
                });
                (addr, answer)
            })
            .collect();
        let mut last = None;
        while let Some((addr, answer)) = answers.next().await {
            let host = slots::host_port(&addr).map(|(h, _)| h).unwrap_or_default();
            match answer.and_then(Value::extract_error) {
                Ok(answer) => match Topology::read(&answer, &host) {
                    Some(topology) => return Ok(topology),
                    None => {
                        last = Some(RedisError::from((
                            redis::ErrorKind::Client,
                            "a node's CLUSTER SLOTS named no primary",
                            addr,
                        )));
                    }
                },
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            RedisError::from((redis::ErrorKind::Client, "no cluster node to ask"))
        }))
    }

    /// Reads the slots again in the background (at most one reading at a time, and
    /// [`REFRESH_GAP`] apart); calls go on meanwhile by what is known.
    fn refresh_soon(self: Arc<Self>) {
        {
            let mut refresh = locked(&self.refresh);
            if refresh.running {
                refresh.again = true;
                return;
            }
            refresh.running = true;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            locked(&self.refresh).running = false;
            return;
        };
        runtime.spawn(async move {
            loop {
                let last = locked(&self.refresh).last;
                if let Some(wait) = last.and_then(|l| REFRESH_GAP.checked_sub(l.elapsed())) {
                    tokio::time::sleep(wait).await;
                }
                locked(&self.refresh).again = false;
                match self.read_slots().await {
                    Ok(topology) => {
                        let primaries = topology.primaries();
                        *locked(&self.topology) = topology;
                        // Connections to nodes that serve no slot now are let go.
                        locked(&self.nodes).retain(|addr, _| primaries.contains(addr));
                        tracing::debug!(?primaries, "cluster slots read again");
                    }
                    Err(e) => tracing::debug!(error = %e, "cluster slots not read"),
                }
                let mut refresh = locked(&self.refresh);
                refresh.last = Some(Instant::now());
                if !refresh.again {
                    refresh.running = false;
                    return;
                }
            }
        });
    }

    /// The error for a cluster none of whose nodes answered.
    fn unreachable(&self, source: RedisError) -> LockError {
        LockError::Connect {
            database: 0,
            address: self.seeds.join(", "),
            source,
        }
    }
}

/// Makes a multiplexed connection (within [`CONNECT_TIMEOUT`]); the lock bounds each
/// call with its own response timeout.
async fn connect(info: ConnectionInfo) -> Result<MultiplexedConnection, RedisError> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(None);
    redis::Client::open(info)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// A pipeline's replies, read for a redirection only when every keyed command was
/// redirected (which proves none of them ran).
fn pipeline_redirect(
    pipe: &Pipeline,
    offset: usize,
    replies: &Result<Vec<Value>, RedisError>,
) -> Option<Redirect> {
    let replies = match replies {
        Err(e) => return Redirect::of_reply(&Err(e.clone())),
        Ok(replies) => replies,
    };
    if offset != 0 {
        return None;
    }
    let mut found = None;
    for (cmd, reply) in pipe.cmd_iter().zip(replies) {
        if slots::of_cmd(cmd).is_none() {
            continue;
        }
        let redirect = Redirect::of_reply(&Ok(reply.clone()))?;
        if found.as_ref().is_some_and(|f| *f != redirect) {
            return None;
        }
        found = Some(redirect);
    }
    found
}

impl ConnectionLike for ClusterConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        async move {
            match slots::spread_of(cmd) {
                Spread::One => {}
                Spread::EveryAnswers => return self.every_primary(cmd).await,
                Spread::EveryAccepts => {
                    let Value::Map(answers) = self.every_primary(cmd).await? else {
                        return Ok(Value::Nil);
                    };
                    let mut answers = answers.into_iter().map(|(_, answer)| answer);
                    let first = answers.next().unwrap_or(Value::Nil);
                    // A refusal anywhere is the answer: not every primary took it.
                    let refused = std::iter::once(first.clone())
                        .chain(answers)
                        .find(|a| matches!(a, Value::ServerError(_)));
                    return Ok(refused.unwrap_or(first));
                }
            }
            let slot = slots::of_cmd(cmd);
            let owned = cmd.clone();
            let send = |mut conn: MultiplexedConnection, asking: bool| {
                let cmd = owned.clone();
                async move {
                    if !asking {
                        return conn.req_packed_command(&cmd).await;
                    }
                    let mut pipe = redis::pipe();
                    pipe.cmd("ASKING").add_command(cmd);
                    let mut replies = conn.req_packed_commands(&pipe, 0, 2).await?;
                    Ok(replies.pop().unwrap_or(Value::Nil))
                }
                .boxed()
            };
            self.route(slot, send, Redirect::of_reply).await
        }
        .boxed()
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        async move {
            let slot = slots::of_pipeline(pipeline)?;
            let owned = Arc::new(pipeline.clone());
            let send = |mut conn: MultiplexedConnection, _asking: bool| {
                let pipe = Arc::clone(&owned);
                async move { conn.req_packed_commands(&pipe, offset, count).await }.boxed()
            };
            let redirect_of = |replies: &Result<Vec<Value>, RedisError>| {
                // An ASK for a pipeline is left to the caller: some of its commands may
                // have run where they were sent.
                pipeline_redirect(pipeline, offset, replies)
                    .filter(|r| matches!(r, Redirect::Moved { .. }))
            };
            self.route(slot, send, redirect_of).await
        }
        .boxed()
    }

    fn get_db(&self) -> i64 {
        0
    }
}
