//! [`TestRedis`]: a clean Redis for one test, what `#[lockscript_test::test]` hands to a
//! test; [`TestArg`] and [`AsyncTestArg`], how the attribute makes each argument.
//!
//! Servers are pooled: a test takes a private `redis-server` of its run's binary (see
//! [`matrix`](crate::matrix)) from this process's pool (or starts one), finds it empty
//! (`FLUSHALL`, `FUNCTION FLUSH`) with every script of the binary loaded, counts only the
//! commands it runs after its fixtures, and gives the server back when it ends, unless it
//! panicked: then the server is killed and its log printed. A pooled server is reused only
//! if it answers `PING` within [`TestRedis::PING_BOUND`]: one that a test shut down, froze
//! or left busy is killed and replaced. A pooled server outlives no test process: a
//! small `sh` reaper per server kills it and removes its directory when the process that
//! started it ends, however it ends.
//!
//! With `LOCKSCRIPT_TEST_URL` set (a server in CI, say), no server is started: each test
//! claims a database of its own on that server (1 to 15; the claim is a key in database
//! 0), finds it empty, and empties it again when done. Tests that change the server's
//! configuration (`CONFIG SET`, `ACL`, `CLIENT PAUSE`...) should start their own
//! [`RedisServer`] instead.

use std::collections::{BTreeMap, HashMap};
#[cfg(feature = "tokio")]
use std::future::Future;
use std::io::Write as _;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::server::RedisServer;

/// Names a server to use instead of starting private ones: a Redis URL
/// (`redis://host:port/`; a user and password, a query such as `?protocol=resp3`, and
/// `rediss://` are kept in each test's URL; a database it names is replaced by the one the
/// test claims).
pub const URL_ENV: &str = "LOCKSCRIPT_TEST_URL";
/// The key in database 0 of a [`URL_ENV`] server by which a test holds database `n`.
const CLAIM_PREFIX: &str = "lockscript-test:claim:";
/// A claim outlives a test process that died without releasing it by at most this.
const CLAIM_TTL: Duration = Duration::from_secs(600);
/// How long a test waits for a free database on a [`URL_ENV`] server.
const CLAIM_WAIT: Duration = Duration::from_secs(60);

/// A private server of the pool and the reaper that kills it when this process ends.
struct Pooled {
    server: RedisServer,
    /// Held open; the reaper acts when it closes (this process ended).
    _lifeline: ChildStdin,
    reaper: Child,
}

/// Servers no test is using, of every binary of the matrix.
static POOL: Mutex<Vec<Pooled>> = Mutex::new(Vec::new());

/// Where a [`TestRedis`]'s data lives.
enum Place {
    /// A private server of the pool.
    Local(Option<Pooled>),
    /// Database `db` of the [`URL_ENV`] server, claimed with `token`.
    Remote {
        /// The server's URL on database 0, where the claims are.
        base: String,
        db: u32,
        token: String,
    },
}

/// A clean Redis for one test: empty, counters zeroed, every script of the binary
/// loaded (`lockscript::load_scripts`).
///
/// It is a private `redis-server` from this process's pool (started on first use, given
/// back when the handle drops, discarded with its log printed when the test panicked,
/// killed when the process ends), or, with [`URL_ENV`] set, a database of its own on
/// that server, emptied before and after the test.
///
/// ```no_run
/// use lockscript_test::TestRedis;
///
/// let redis = TestRedis::start();
/// redis.exec("SET balance 10\nEXPIRE balance 60");
/// let mut conn = redis.connection();
/// let balance: i64 = redis::cmd("GET").arg("balance").query(&mut conn).unwrap();
/// assert_eq!(balance, 10);
/// assert!(redis.expire_now("balance"));
/// assert_eq!(redis.command_calls("expire"), 1);
/// ```
pub struct TestRedis {
    place: Place,
    url: String,
    /// Per command, the calls that were not the test's doing (its fixtures, `exec`, and
    /// on a [`URL_ENV`] server what ran before [`reset_stats`](Self::reset_stats)):
    /// [`command_calls`](Self::command_calls) leaves them out.
    baseline: Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for TestRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestRedis")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl TestRedis {
    /// How long a pooled server has to answer `PING` before a test reuses it. One that
    /// does not (a test before shut it down, froze it with `SIGSTOP`, or left a script
    /// running) is killed, never waited on, and a fresh server replaces it: a test's
    /// set-up takes at most this longer than a server's start, per such server.
    ///
    /// ```no_run
    /// assert!(lockscript_test::TestRedis::PING_BOUND.as_millis() <= 1000);
    /// ```
    pub const PING_BOUND: Duration = Duration::from_millis(500);

    /// A clean Redis: a pooled private server (of the binary of the matrix run in
    /// progress on this thread, otherwise the first of `REDIS_SERVER_BIN`), or a database
    /// of its own on the [`URL_ENV`] server.
    ///
    /// # Panics
    ///
    /// If no server can be started (the message says how to install one), or the
    /// [`URL_ENV`] server cannot be reached or has no free database within a minute.
    #[must_use]
    pub fn start() -> TestRedis {
        let redis = match std::env::var(URL_ENV) {
            Ok(base) if !base.is_empty() => return Self::start_on(&base),
            _ => {
                let bin = crate::matrix::current();
                let pooled = Pooled::take(&bin).unwrap_or_else(|| Pooled::start(bin));
                TestRedis {
                    url: pooled.server.url(),
                    place: Place::Local(Some(pooled)),
                    baseline: Mutex::default(),
                }
            }
        };
        redis.reset();
        redis
    }

    /// A database of its own on the server at `base` (a Redis URL, as [`URL_ENV`] takes
    /// it), what [`start`](Self::start) does when [`URL_ENV`] is set: claimed until the
    /// handle is dropped, empty, with the binary's scripts loaded. Its [`url`](Self::url)
    /// is `base` with the claimed database in place of any `base` names, and the rest of
    /// `base` (user, password, query, `rediss://`) kept.
    ///
    /// ```no_run
    /// let redis = lockscript_test::TestRedis::start_on("redis://127.0.0.1:6390/?protocol=resp3");
    /// assert!(redis.url().ends_with("?protocol=resp3"));
    /// ```
    ///
    /// # Panics
    ///
    /// If `base` is not a Redis URL, the server cannot be reached, or it has no free
    /// database within a minute.
    #[must_use]
    pub fn start_on(base: &str) -> TestRedis {
        let redis = Self::claim(base);
        redis.reset();
        redis
    }

    /// Claims a free database of the server at `base`.
    fn claim(given: &str) -> TestRedis {
        static CLAIMS: AtomicU64 = AtomicU64::new(0);
        let url_of = |db: u32| {
            database_url(given, db).unwrap_or_else(|| {
                panic!(
                    "{URL_ENV}={given} is not a Redis URL: expected \
                     redis://[user:password@]host:port/[?query], rediss://... or unix:///path"
                )
            })
        };
        let base = url_of(0);
        let client = redis::Client::open(base.as_str())
            .unwrap_or_else(|e| panic!("{URL_ENV}={given} is not a Redis URL: {e}"));
        let mut conn = client.get_connection().unwrap_or_else(|e| {
            panic!("cannot connect to the server {URL_ENV} names ({base}): {e}")
        });
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let token = format!(
            "{}-{}-{}",
            std::process::id(),
            since_epoch.as_nanos(),
            CLAIMS.fetch_add(1, Ordering::Relaxed)
        );
        let deadline = Instant::now() + CLAIM_WAIT;
        loop {
            for db in 1..16u32 {
                let claimed: bool = redis::cmd("SET")
                    .arg(format!("{CLAIM_PREFIX}{db}"))
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(CLAIM_TTL.as_millis().to_string())
                    .query::<Option<String>>(&mut conn)
                    .unwrap_or_else(|e| panic!("cannot claim a database on {base}: {e}"))
                    .is_some();
                if claimed {
                    return TestRedis {
                        url: url_of(db),
                        place: Place::Remote { base, db, token },
                        baseline: Mutex::default(),
                    };
                }
            }
            assert!(
                Instant::now() < deadline,
                "no free database on {base} ({URL_ENV}) for {CLAIM_WAIT:?}: databases 1 to \
                 15 are claimed by other tests (keys {CLAIM_PREFIX}N in database 0)"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Empties the data, loads the binary's scripts, then zeroes the counters.
    fn reset(&self) {
        let mut conn = self.connection();
        match &self.place {
            Place::Local(_) => {
                redis::cmd("FLUSHALL")
                    .exec(&mut conn)
                    .unwrap_or_else(|e| panic!("FLUSHALL on {}: {e}", self.url));
                // Redis 7 and later; older servers have no functions to flush.
                let _: redis::RedisResult<()> =
                    redis::cmd("FUNCTION").arg("FLUSH").query(&mut conn);
            }
            Place::Remote { .. } => redis::cmd("FLUSHDB")
                .exec(&mut conn)
                .unwrap_or_else(|e| panic!("FLUSHDB on {}: {e}", self.url)),
        }
        crate::load_scripts(&mut conn);
        // What the set-up ran (its SCRIPT LOADs) is not the test's doing: command_calls
        // counts from here, as reset_stats makes it (CONFIG RESETSTAT on a private
        // server; on a shared one, whose counters are not ours, a baseline).
        self.reset_stats_on(&mut conn);
    }

    /// The connection URL (it selects the test's database on a [`URL_ENV`] server).
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client for [`url`](Self::url).
    ///
    /// # Panics
    ///
    /// Never in practice (the URL is well formed).
    #[must_use]
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url.as_str()).unwrap_or_else(|e| panic!("{}: {e}", self.url))
    }

    /// A synchronous connection.
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    #[must_use]
    pub fn connection(&self) -> redis::Connection {
        self.client()
            .get_connection()
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.url))
    }

    /// Which server this is, for a message: "Valkey 9.1.2 (/opt/valkey/valkey-server)", or
    /// the URL of a [`URL_ENV`] server.
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    #[must_use]
    pub fn describe(&self) -> String {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("INFO server on {}: {e}", self.url));
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let product = match field("valkey_version") {
            Some(version) => format!("Valkey {version}"),
            None => format!(
                "Redis {}",
                field("redis_version").unwrap_or("(unknown version)")
            ),
        };
        match self.server() {
            Some(server) => format!("{product} ({})", server.binary().display()),
            None => format!("{product} ({})", self.url),
        }
    }

    /// A multiplexed async connection (on the current tokio runtime).
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    #[cfg(feature = "tokio")]
    pub async fn async_connection(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.url))
    }

    /// A managed async connection, that reconnects by itself (on the current tokio
    /// runtime).
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    #[cfg(feature = "tokio")]
    pub async fn connection_manager(&self) -> redis::aio::ConnectionManager {
        self.client()
            .get_connection_manager()
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.url))
    }

    /// The private server, to read its log or signal it; `None` on a [`URL_ENV`] server.
    #[must_use]
    pub fn server(&self) -> Option<&RedisServer> {
        match &self.place {
            Place::Local(pooled) => pooled.as_ref().map(|p| &p.server),
            Place::Remote { .. } => None,
        }
    }

    /// Runs redis-cli commands, one per line, in the format of fixture files
    /// ([`commands`](crate::commands)): the data a test starts from. Like a fixture's, they
    /// are not counted by [`command_calls`](Self::command_calls).
    ///
    /// # Panics
    ///
    /// If a line does not parse or a command fails; the message names the line.
    pub fn exec(&self, commands: &str) {
        self.load_fixture("exec", commands);
    }

    /// Runs the commands of fixture `name` (its text), as [`exec`](Self::exec) does;
    /// `#[lockscript_test::test(fixtures("..."))]` calls it for each file.
    ///
    /// # Panics
    ///
    /// If a line does not parse or a command fails; the message names the file and line.
    pub fn load_fixture(&self, name: &str, text: &str) {
        let lines = crate::commands::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let before = self.command_counts();
        let mut conn = self.connection();
        for line in lines {
            let mut cmd = redis::Cmd::new();
            for word in &line.words {
                cmd.arg(word.as_slice());
            }
            if let Err(e) = cmd.query::<redis::Value>(&mut conn) {
                panic!("{name}:{}: {e}", line.number);
            }
        }
        // What the fixture ran is not the test's doing: leave it out of the counts.
        let after = self.command_counts();
        let mut baseline = self.baseline.lock().unwrap_or_else(PoisonError::into_inner);
        for (command, count) in after {
            let added = count.saturating_sub(before.get(&command).copied().unwrap_or(0));
            *baseline.entry(command).or_insert(0) += added;
        }
    }

    /// Every command's count in `INFO commandstats` (calls plus rejected calls).
    fn command_counts(&self) -> HashMap<String, u64> {
        crate::command_counts(&mut self.connection())
    }

    /// Every key and its value, to assert on what a script left behind: strings as
    /// `GET`, hashes as `HGETALL`, lists as `LRANGE 0 -1`, sets sorted (`SORT key ALPHA`),
    /// sorted sets as `ZRANGE 0 -1 WITHSCORES`, anything else as its `TYPE`.
    ///
    /// ```no_run
    /// # let redis = lockscript_test::TestRedis::start();
    /// redis.exec("SET a 1\nRPUSH q x y");
    /// let keys = redis.snapshot();
    /// assert_eq!(keys["a"], redis::Value::BulkString(b"1".to_vec()));
    /// assert_eq!(keys.len(), 2);
    /// ```
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    pub fn snapshot(&self) -> BTreeMap<String, redis::Value> {
        let mut conn = self.connection();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("KEYS *: {e}"));
        keys.into_iter()
            .map(|key| {
                let kind: String = redis::cmd("TYPE")
                    .arg(&key)
                    .query(&mut conn)
                    .unwrap_or_else(|e| panic!("TYPE {key}: {e}"));
                let read = match kind.as_str() {
                    "string" => redis::cmd("GET").arg(&key).clone(),
                    "hash" => redis::cmd("HGETALL").arg(&key).clone(),
                    "list" => redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).clone(),
                    "set" => redis::cmd("SORT").arg(&key).arg("ALPHA").clone(),
                    "zset" => redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .clone(),
                    _ => return (key, redis::Value::SimpleString(kind)),
                };
                let value = read
                    .query(&mut conn)
                    .unwrap_or_else(|e| panic!("reading {key}: {e}"));
                (key, value)
            })
            .collect()
    }

    /// Makes `key` expire now, as if its TTL had run out (`PEXPIRE key 0`), so a test
    /// reaches a script's expiry path without sleeping. Whether the key existed.
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    pub fn expire_now(&self, key: &str) -> bool {
        redis::cmd("PEXPIRE")
            .arg(key)
            .arg(0)
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("PEXPIRE {key} 0: {e}"))
    }

    /// How many times `command` ran since the test began, calls made by scripts included
    /// (`INFO commandstats`, lowercase names: `"set"`, `"evalsha"`, `"script|load"`), to
    /// assert a script did no more than it should. What the set-up ran (the `SCRIPT LOAD`
    /// of each script of the binary) and what the test's fixtures and [`exec`](Self::exec)
    /// ran are not counted. Server-wide: on a [`URL_ENV`] server other tests count too.
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    pub fn command_calls(&self, command: &str) -> u64 {
        let calls = crate::command_calls(&mut self.connection(), command);
        let before = self
            .baseline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(command)
            .copied()
            .unwrap_or(0);
        calls.saturating_sub(before)
    }

    /// Zeroes the counters [`command_calls`](Self::command_calls) reads, for example
    /// after setting up the data.
    ///
    /// ```no_run
    /// let redis = lockscript_test::TestRedis::start();
    /// redis::cmd("SET").arg("k").arg(1).exec(&mut redis.connection()).unwrap();
    /// redis.reset_stats();
    /// assert_eq!(redis.command_calls("set"), 0);
    /// ```
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    pub fn reset_stats(&self) {
        self.reset_stats_on(&mut self.connection());
    }

    /// [`reset_stats`](Self::reset_stats) on `conn`, a connection to this Redis.
    fn reset_stats_on(&self, conn: &mut redis::Connection) {
        let mut baseline = self.baseline.lock().unwrap_or_else(PoisonError::into_inner);
        match self.place {
            Place::Local(_) => {
                crate::reset_stats(conn);
                baseline.clear();
            }
            // Another test's counters are not ours to zero: count from here instead.
            Place::Remote { .. } => *baseline = crate::command_counts(conn),
        }
    }
}

/// How long a server dropped by a panicking test has to answer `PING` for its log to be
/// left out: it answered, so the failure is the test's own.
const HEALTHY_AFTER_PANIC: Duration = Duration::from_millis(250);

impl Drop for TestRedis {
    fn drop(&mut self) {
        match &mut self.place {
            Place::Local(pooled) => {
                let Some(mut pooled) = pooled.take() else {
                    return;
                };
                // After a panic the server's state is suspect: it is dropped, its log
                // printed only when the server itself stopped answering (a plain assertion
                // failure would be buried under it).
                if thread::panicking() && pooled.server.answers_ping(HEALTHY_AFTER_PANIC) {
                    pooled.server.quiet_on_panic();
                    eprintln!(
                        "(redis-server on port {} answered PING after the test panicked: its \
                         log is left out)",
                        pooled.server.port()
                    );
                }
                if !thread::panicking() && pooled.server.is_running() {
                    POOL.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(pooled);
                }
            }
            Place::Remote { base, db, token } => {
                let Ok(client) = redis::Client::open(base.as_str()) else {
                    return;
                };
                let Ok(mut conn) = client.get_connection() else {
                    return;
                };
                let _: redis::RedisResult<()> = redis::cmd("SELECT").arg(*db).query(&mut conn);
                let _: redis::RedisResult<()> = redis::cmd("FLUSHDB").query(&mut conn);
                let _: redis::RedisResult<()> = redis::cmd("SELECT").arg(0).query(&mut conn);
                let _ = lockscript::builtin::compare_del(&format!("{CLAIM_PREFIX}{db}"), token)
                    .invoke(&mut conn);
            }
        }
    }
}

/// `base` on database `db`: in its path (`redis://host:port/db`), or for a Unix socket in
/// its `db` parameter; its scheme, user, password, other parameters and fragment kept.
/// Built with redis's own URL parser (so it reads `base` as the client will); `None` when
/// that refuses it.
fn database_url(base: &str, db: u32) -> Option<String> {
    let mut url = redis::parse_redis_url(base)?;
    if url.scheme().ends_with("unix") {
        let others: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(name, _)| name != "db")
            .map(|(name, value)| (name.into_owned(), value.into_owned()))
            .collect();
        url.query_pairs_mut()
            .clear()
            .extend_pairs(others)
            .append_pair("db", &db.to_string());
    } else {
        url.set_path(&format!("/{db}"));
    }
    Some(url.to_string())
}

impl Pooled {
    /// A server of `bin` from the pool that answers `PING` within
    /// [`TestRedis::PING_BOUND`]; the ones found dead or frozen on the way are dropped
    /// (killed and reaped).
    fn take(bin: &std::path::Path) -> Option<Pooled> {
        loop {
            let pooled = {
                let mut pool = POOL.lock().unwrap_or_else(PoisonError::into_inner);
                let mine = pool.iter().rposition(|p| p.server.binary() == bin)?;
                pool.swap_remove(mine)
            };
            if pooled.server.answers_ping(TestRedis::PING_BOUND) {
                return Some(pooled);
            }
            eprintln!(
                "lockscript-test: the pooled redis-server on port {} (pid {}) did not answer \
                 PING within {:?} (a test shut it down, froze it or left it busy): replaced",
                pooled.server.port(),
                pooled.server.pid(),
                TestRedis::PING_BOUND
            );
        }
    }

    fn start(bin: std::path::PathBuf) -> Pooled {
        let server = RedisServer::builder().binary(bin).start();
        // Kills the server and removes its directory once stdin closes, that is when this
        // process ends: statics are never dropped, so the pool cannot do it itself.
        let mut reaper = Command::new("sh")
            .arg("-c")
            .arg(
                // Only a process that is still a server: its pid may have been reused.
                "while read -r _; do :; done; \
                 if [ -r /proc/$1/cmdline ]; then grep -qa server /proc/$1/cmdline || exit 0; fi; \
                 kill -9 \"$1\" 2>/dev/null; \
                 while kill -0 \"$1\" 2>/dev/null; do sleep 0.05; done; rm -rf \"$2\"",
            )
            .arg("lockscript-test-reaper")
            .arg(server.pid().to_string())
            .arg(server.dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the reaper of a pooled redis-server: {e}"));
        let mut lifeline = reaper.stdin.take().expect("piped stdin");
        let _ = lifeline.flush();
        Pooled {
            server,
            _lifeline: lifeline,
            reaper,
        }
    }
}

impl Drop for Pooled {
    /// A server dropped by this process (after a panic) is killed by its own drop: stop
    /// the reaper first, so that it never signals a pid the system may hand out again.
    fn drop(&mut self) {
        let _ = self.reaper.kill();
        let _ = self.reaper.wait();
    }
}

/// What a synchronous `#[lockscript_test::test]` function may take (by value, `&` or
/// `&mut`), made from the test's [`TestRedis`]. The handle itself (`&TestRedis`) is
/// passed as it is.
#[diagnostic::on_unimplemented(
    message = "a #[lockscript_test::test] function cannot take a `{Self}`",
    label = "not something the test's Redis can give",
    note = "take `&TestRedis`, a `redis::Connection` or a `redis::Client`; async tests may \
            also take a `MultiplexedConnection` or a `ConnectionManager`"
)]
pub trait TestArg: Sized {
    /// Makes the argument.
    fn make(redis: &TestRedis) -> Self;
}

impl TestArg for redis::Connection {
    fn make(redis: &TestRedis) -> Self {
        redis.connection()
    }
}

impl TestArg for redis::Client {
    fn make(redis: &TestRedis) -> Self {
        redis.client()
    }
}

/// The blocking face of lockscript, on a connection of the test's server.
#[cfg(feature = "blocking")]
impl TestArg for lockscript::blocking::Locks {
    fn make(redis: &TestRedis) -> Self {
        lockscript::blocking::Locks::connect(&redis.client())
            .unwrap_or_else(|e| panic!("blocking::Locks::connect to {}: {e}", redis.url))
    }
}

/// What an `async` `#[lockscript_test::test]` function may take, made on the test's
/// runtime from its [`TestRedis`].
#[cfg(feature = "tokio")]
#[diagnostic::on_unimplemented(
    message = "an async #[lockscript_test::test] function cannot take a `{Self}`",
    label = "not something the test's Redis can give",
    note = "take `&TestRedis`, a `redis::aio::MultiplexedConnection`, a \
            `redis::aio::ConnectionManager`, a `redis::Connection` or a `redis::Client`"
)]
pub trait AsyncTestArg: Sized {
    /// Makes the argument.
    fn make(redis: &TestRedis) -> impl Future<Output = Self>;
}

#[cfg(feature = "tokio")]
impl AsyncTestArg for redis::aio::MultiplexedConnection {
    async fn make(redis: &TestRedis) -> Self {
        redis.async_connection().await
    }
}

#[cfg(feature = "tokio")]
impl AsyncTestArg for redis::aio::ConnectionManager {
    async fn make(redis: &TestRedis) -> Self {
        redis.connection_manager().await
    }
}

#[cfg(feature = "tokio")]
impl AsyncTestArg for redis::Connection {
    async fn make(redis: &TestRedis) -> Self {
        redis.connection()
    }
}

#[cfg(feature = "tokio")]
impl AsyncTestArg for redis::Client {
    async fn make(redis: &TestRedis) -> Self {
        redis.client()
    }
}

/// The async face of lockscript, on a managed connection of the test's server.
#[cfg(feature = "tokio")]
impl AsyncTestArg for lockscript::Locks {
    async fn make(redis: &TestRedis) -> Self {
        lockscript::Locks::connect(&redis.client())
            .await
            .unwrap_or_else(|e| panic!("Locks::connect to {}: {e}", redis.url))
    }
}

#[cfg(test)]
mod tests {
    use super::database_url;
    use redis::IntoConnectionInfo;

    /// The database and protocol a client of `url` uses.
    fn settings(url: &str) -> (i64, redis::ProtocolVersion) {
        let info = url.into_connection_info().unwrap();
        (info.redis_settings().db(), info.redis_settings().protocol())
    }

    #[test]
    fn a_database_url_replaces_the_database_and_keeps_the_rest() {
        for (base, expected) in [
            ("redis://h:1", "redis://h:1/3"),
            ("redis://h:1/", "redis://h:1/3"),
            ("redis://h:1/0", "redis://h:1/3"),
            ("redis://h:1/12/", "redis://h:1/3"),
            (
                "redis://h:1/?protocol=resp3",
                "redis://h:1/3?protocol=resp3",
            ),
            (
                "redis://u:p%40ss@h:1/5?protocol=resp3",
                "redis://u:p%40ss@h:1/3?protocol=resp3",
            ),
            ("redis://:pw@[::1]:1/", "redis://:pw@[::1]:1/3"),
            ("valkey://h:1/0", "valkey://h:1/3"),
        ] {
            let url = database_url(base, 3).unwrap();
            assert_eq!(url, expected, "{base}");
            let protocol = settings(base).1;
            assert_eq!(settings(&url), (3, protocol), "{base}");
        }
        let (_, resp3) = settings("redis://h:1/?protocol=resp3");
        assert_eq!(resp3, redis::ProtocolVersion::RESP3);
    }

    #[test]
    fn a_tls_database_url_keeps_its_scheme_and_fragment() {
        assert_eq!(
            database_url("rediss://u:pw@h:6380/0?protocol=resp3#insecure", 7).unwrap(),
            "rediss://u:pw@h:6380/7?protocol=resp3#insecure"
        );
        assert_eq!(
            database_url("rediss://h:6380", 7).unwrap(),
            "rediss://h:6380/7"
        );
    }

    #[test]
    fn a_unix_socket_database_url_sets_its_db_parameter() {
        let url = database_url("unix:///run/redis.sock?db=2&protocol=resp3", 4).unwrap();
        assert_eq!(url, "unix:///run/redis.sock?protocol=resp3&db=4");
        assert_eq!(settings(&url), (4, redis::ProtocolVersion::RESP3));
        assert_eq!(
            database_url("redis+unix:///run/redis.sock", 4).unwrap(),
            "redis+unix:///run/redis.sock?db=4"
        );
    }

    #[test]
    fn what_is_not_a_redis_url_has_no_database_url() {
        for base in ["127.0.0.1:6379", "http://h:1/", "", "redis//h"] {
            assert_eq!(database_url(base, 1), None, "{base}");
        }
    }
}
