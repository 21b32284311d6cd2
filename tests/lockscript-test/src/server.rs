//! A private `redis-server` for one test, modelled on redis-rs's `redis-test/src/server.rs`:
//! what [`TestRedis`](crate::TestRedis) pools, and what a test that reconfigures its server
//! (`CONFIG SET`, ACLs, a replica) starts for itself.
//!
//! Every [`RedisServer`] runs its own `redis-server` process on a free loopback port, with its
//! own temporary directory (working dir, log file, AOF files). Nothing is persisted unless the
//! test asks for it through [`ServerBuilder::arg`]. The process is killed (SIGKILL) and reaped
//! when the value is dropped; if the drop happens while the thread is panicking, the tail of the
//! server's log is printed to stderr so the failing test shows what the server saw.
//!
//! ```no_run
//! use lockscript_test::server::RedisServer;
//!
//! let server = RedisServer::builder()
//!     .arg("--appendonly")
//!     .arg("yes")
//!     .start();
//! let mut con = server.connection();
//! redis::cmd("SET").arg("k").arg("v").exec(&mut con).unwrap();
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, flock};
use rustix::io::Errno;

use crate::matrix::{self, BIN_ENV};

/// How to get a server binary, for the message about a missing one.
const INSTALL_HINT: &str = "install it with `apt-get install -y redis-server` \
     (Debian/Ubuntu) or `brew install redis`";
/// How long a starting server may take to answer `PING`.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`RedisServer::connection`] / [`RedisServer::multiplexed`] retry a refused connect.
const CONNECT_RETRY: Duration = Duration::from_secs(5);
/// How long one readiness probe of a starting server waits for its answer.
const READY_PROBE: Duration = Duration::from_millis(500);
/// Pause between two readiness / connect attempts.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How many fresh ports to try when another process grabs ours before redis binds it.
const PORT_ATTEMPTS: usize = 5;
/// How many candidate ports [`free_port`] and [`free_port_where`] draw before giving up.
const PORT_FILTER_ATTEMPTS: usize = 1000;
/// Lines of log printed when a test panics with the server alive, or put in panic messages.
const LOG_TAIL_LINES: usize = 100;
/// The port a developer's own redis most likely runs on; never hand it out.
const DEFAULT_REDIS_PORT: u16 = 6379;
/// Log file name inside the temp dir.
const LOG_FILE: &str = "redis.log";
/// File inside the temp dir receiving the process's stdout and stderr (errors printed before
/// the log file is opened, e.g. a bad command line, only show up there).
const OUTPUT_FILE: &str = "redis.stdout";

/// A private redis-server for one test.
///
/// Started with [`RedisServer::start`] or [`RedisServer::builder`]; killed (SIGKILL) and reaped
/// on drop, after which its temporary directory is removed.
#[derive(Debug)]
pub struct RedisServer {
    /// The running process; `None` between [`RedisServer::stop`] and [`RedisServer::restart`].
    child: Option<Child>,
    /// Pid of the most recently started process.
    pid: u32,
    /// The loopback port, kept across restarts.
    port: u16,
    /// The binary it runs.
    bin: PathBuf,
    /// The builder's extra arguments, replayed on restart.
    extra_args: Vec<String>,
    /// The builder's environment variables, replayed on restart.
    envs: Vec<(String, String)>,
    /// Whether dropping it while the thread panics prints its log (see
    /// [`RedisServer::quiet_on_panic`]).
    log_on_panic: bool,
    /// Working dir, log file, AOF/RDB files. Declared last so it is removed after the kill.
    dir: TempDir,
}

/// Builder for a [`RedisServer`] with extra `redis-server` command-line arguments.
///
/// ```no_run
/// # use lockscript_test::server::RedisServer;
/// let server = RedisServer::builder()
///     .arg("--appendonly")
///     .arg("yes")
///     .start();
/// ```
#[derive(Debug, Default, Clone)]
pub struct ServerBuilder {
    /// Extra arguments, appended after the defaults so they can override them.
    args: Vec<String>,
    /// Extra condition a candidate port must meet; see [`ServerBuilder::port_filter`].
    port_filter: Option<fn(u16) -> bool>,
    /// Environment variables for the server process; see [`ServerBuilder::env`].
    envs: Vec<(String, String)>,
    /// The binary; see [`ServerBuilder::binary`].
    bin: Option<PathBuf>,
}

impl ServerBuilder {
    /// Appends one command-line argument (e.g. `"--appendonly"`, then `"yes"`).
    ///
    /// Extra arguments come after the harness's defaults (`--port`, `--bind 127.0.0.1`,
    /// `--save ''`, `--appendonly no`, `--dir`, `--logfile`, `--daemonize no`), so they can
    /// override any default except the port, the bind address, the dir and the log file, which
    /// the harness relies on.
    #[must_use]
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    /// Runs this binary instead of the server of the matrix being tested: the one
    /// `#[lockscript_test::test]` runs the test on, otherwise the first of
    /// [`REDIS_SERVER_BIN`](crate::matrix::BIN_ENV), otherwise `redis-server` from `PATH`.
    ///
    /// ```no_run
    /// # use lockscript_test::server::RedisServer;
    /// let valkey = RedisServer::builder().binary("/opt/valkey/bin/valkey-server").start();
    /// ```
    #[must_use]
    pub fn binary(mut self, bin: impl Into<PathBuf>) -> Self {
        self.bin = Some(bin.into());
        self
    }

    /// Sets an environment variable for the server process, on every start and restart:
    /// e.g. `LD_PRELOAD` of libfaketime, to run the server on a clock a test can move.
    ///
    /// ```no_run
    /// # use lockscript_test::server::RedisServer;
    /// let server = RedisServer::builder()
    ///     .env("FAKETIME_TIMESTAMP_FILE", "/tmp/clock")
    ///     .start();
    /// ```
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Only hands out ports for which `accept(port)` holds, e.g. to make sure a cluster node's
    /// bus port (`port + 10000`) is below 65536 and free too. Checked when the port is picked
    /// (not again on [`RedisServer::restart`]); if another process takes a port after the check,
    /// redis fails with "Address already in use" and the harness retries with a fresh port.
    #[must_use]
    pub fn port_filter(mut self, accept: fn(u16) -> bool) -> Self {
        self.port_filter = Some(accept);
        self
    }

    /// Starts the server and waits until it answers `PING`.
    ///
    /// # Panics
    ///
    /// If the temp dir cannot be created, the binary is missing (the message names the path
    /// tried, whether `REDIS_SERVER_BIN` or [`binary`](Self::binary) gave it, and what to
    /// set; for `redis-server` from `PATH`, how to install it), the server exits during startup, it
    /// does not answer within ~10 s, or no free port could be bound after a few attempts. The
    /// message includes the server's log.
    #[must_use]
    pub fn start(self) -> RedisServer {
        let dir = TempDir::new()
            .unwrap_or_else(|e| panic!("cannot create a temp dir for redis-server: {e}"));
        let bin = self.bin.unwrap_or_else(matrix::current);
        let mut failures = Vec::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = match self.port_filter {
                Some(accept) => free_port_where(accept),
                None => free_port(),
            };
            match launch(&bin, dir.path(), port, &self.args, &self.envs) {
                Ok(child) => {
                    return RedisServer {
                        pid: child.id(),
                        child: Some(child),
                        port,
                        bin,
                        extra_args: self.args,
                        envs: self.envs,
                        log_on_panic: true,
                        dir,
                    };
                }
                Err(port_taken) => {
                    failures.push(port_taken);
                    // Start the next attempt with a clean log, so `log()` shows the live server.
                    let _ = fs::remove_file(dir.path().join(LOG_FILE));
                    let _ = fs::remove_file(dir.path().join(OUTPUT_FILE));
                }
            }
        }
        panic!(
            "redis-server could not bind a free port after {PORT_ATTEMPTS} attempts:\n{}",
            failures.join("\n")
        );
    }
}

impl RedisServer {
    /// Starts a server with the default configuration (no persistence); same as
    /// `RedisServer::builder().start()`.
    ///
    /// # Panics
    ///
    /// See [`ServerBuilder::start`].
    #[must_use]
    pub fn start() -> RedisServer {
        Self::builder().start()
    }

    /// A server that cannot run Lua scripts: a Valkey 9+ (where Lua is a module) with its
    /// `lua` module unloaded. `None` when the binary is another server, where Lua cannot
    /// be taken away.
    ///
    /// # Panics
    ///
    /// See [`ServerBuilder::start`]; and if Valkey 9 refuses to unload its Lua module.
    #[must_use]
    pub fn without_lua() -> Option<RedisServer> {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut Self::start().connection())
            .expect("INFO server");
        if !info.contains("valkey_version:9") {
            return None;
        }
        let server = Self::builder()
            .arg("--enable-module-command")
            .arg("yes")
            .start();
        redis::cmd("MODULE")
            .arg("UNLOAD")
            .arg("lua")
            .exec(&mut server.connection())
            .expect("Valkey 9 unloads its Lua module");
        Some(server)
    }

    /// Whether the server has Redis Functions (7.0+; Redis 6.2 has not).
    #[must_use]
    pub fn has_functions(&self) -> bool {
        crate::has_functions(&mut self.connection())
    }

    /// A builder to add `redis-server` arguments before starting.
    #[must_use]
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// The loopback port the server listens on (unchanged by [`RedisServer::restart`]).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The binary it runs (a path, or a name looked up in `PATH`).
    #[must_use]
    pub fn binary(&self) -> &Path {
        &self.bin
    }

    /// The connection URL, `redis://127.0.0.1:{port}/`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A [`redis::Client`] for this server.
    ///
    /// # Panics
    ///
    /// Never in practice (the URL is always well formed).
    #[must_use]
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url())
            .unwrap_or_else(|e| panic!("invalid redis url {}: {e}", self.url()))
    }

    /// A synchronous connection, retrying for a few seconds while the connection is refused
    /// (e.g. right after a restart).
    ///
    /// # Panics
    ///
    /// If no connection could be made; the message includes the server's log.
    #[must_use]
    pub fn connection(&self) -> redis::Connection {
        let client = self.client();
        let deadline = Instant::now() + CONNECT_RETRY;
        loop {
            match client.get_connection() {
                Ok(con) => return con,
                Err(e) if e.is_connection_refusal() && Instant::now() < deadline => {
                    thread::sleep(POLL_INTERVAL);
                }
                Err(e) => panic!(
                    "cannot connect to redis-server at {}: {e}\n{}",
                    self.url(),
                    self.diagnostics()
                ),
            }
        }
    }

    /// A multiplexed async connection (needs a tokio runtime), retrying for a few seconds while
    /// the connection is refused (e.g. right after a restart).
    ///
    /// Note that redis-rs gives async connections a default response timeout of 500 ms.
    ///
    /// # Panics
    ///
    /// If no connection could be made; the message includes the server's log.
    #[cfg(feature = "tokio")]
    #[must_use]
    pub async fn multiplexed(&self) -> redis::aio::MultiplexedConnection {
        let client = self.client();
        let deadline = Instant::now() + CONNECT_RETRY;
        loop {
            match client.get_multiplexed_async_connection().await {
                Ok(con) => return con,
                Err(e) if e.is_connection_refusal() && Instant::now() < deadline => {
                    tokio::time::sleep(POLL_INTERVAL).await;
                }
                Err(e) => panic!(
                    "cannot connect (async) to redis-server at {}: {e}\n{}",
                    self.url(),
                    self.diagnostics()
                ),
            }
        }
    }

    /// The current contents of the server's log file (empty if there is none yet).
    ///
    /// The file is kept across [`RedisServer::restart`], so it holds every run's output.
    #[must_use]
    pub fn log(&self) -> String {
        read_lossy(&self.dir.path().join(LOG_FILE))
    }

    /// The server's temporary directory (its `--dir`: AOF and RDB files, the log file...).
    /// Removed when the server is dropped.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The pid of the most recently started `redis-server` process.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the server has a process: it was not [`stop`](Self::stop)ped. A process
    /// that exited by itself (`SHUTDOWN`), is frozen (`SIGSTOP`) or busy still counts:
    /// [`answers_ping`](Self::answers_ping) tells whether it serves.
    ///
    /// ```no_run
    /// let mut server = lockscript_test::server::RedisServer::start();
    /// server.stop();
    /// assert!(!server.is_running());
    /// ```
    #[must_use]
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the server's process answers `PING` within `within` (and is this server's
    /// process, not another one on its port): `false` when it was stopped, has exited
    /// (`SHUTDOWN`), is frozen (`SIGSTOP`), or is too busy to answer in time (a long
    /// script). Returns within `within`, whatever the server does.
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// let server = lockscript_test::server::RedisServer::start();
    /// assert!(server.answers_ping(Duration::from_millis(500)));
    /// server.signal("STOP");
    /// assert!(!server.answers_ping(Duration::from_millis(500)));
    /// ```
    #[must_use]
    pub fn answers_ping(&self, within: Duration) -> bool {
        self.child.is_some() && answers(self.port, self.pid, within)
    }

    /// Leaves the server's log out when it is dropped by a panicking thread (it is printed
    /// by default): for a harness that knows the failure was not the server's.
    pub(crate) fn quiet_on_panic(&mut self) {
        self.log_on_panic = false;
    }

    /// Kills the server (SIGKILL, so nothing is flushed on the way out) and reaps it. Keeps the
    /// temp dir and the port number, for [`RedisServer::restart`]. Does nothing if the server
    /// is already stopped.
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            kill_and_reap(child);
        }
    }

    /// Starts the server again on the same port, dir and arguments (stopping it first if it is
    /// running), and waits until it answers `PING` (so any AOF has been loaded).
    ///
    /// # Panics
    ///
    /// If the server cannot start (e.g. another process took the port meanwhile); the message
    /// includes the server's log.
    pub fn restart(&mut self) {
        self.stop();
        match launch(
            &self.bin,
            self.dir.path(),
            self.port,
            &self.extra_args,
            &self.envs,
        ) {
            Ok(child) => {
                self.pid = child.id();
                self.child = Some(child);
            }
            Err(port_taken) => panic!("redis-server could not restart: {port_taken}"),
        }
    }

    /// Keeps the server busy for `busy` with a long script of a client of its own, on a
    /// thread (the server answers nobody meanwhile; the script ends by itself). Join the
    /// handle to wait for the end.
    ///
    /// The script watches the server's CPU clock (`os.clock()`) where its Lua has one:
    /// Valkey 9 answers `TIME` inside a script with the time the script started, so a
    /// loop on `TIME` there spins until the server's busy-script threshold (5 s) makes
    /// it look at its clock again. Elsewhere (Redis 7.0, whose scripts have no `os`),
    /// `TIME`, which moves inside a script there.
    ///
    /// ```no_run
    /// let server = lockscript_test::server::RedisServer::start();
    /// server.busy_for(std::time::Duration::from_millis(300)).join().unwrap();
    /// ```
    pub fn busy_for(&self, busy: Duration) -> std::thread::JoinHandle<()> {
        let mut conn = self.connection();
        let ms = u64::try_from(busy.as_millis()).unwrap_or(u64::MAX);
        std::thread::spawn(move || {
            let _: Result<i64, _> = redis::cmd("EVAL")
                .arg(
                    "local has, clock = pcall(function() return os.clock end) \
                     local function now() \
                       if has and clock then return clock() * 1000 end \
                       local t = redis.call('TIME') return t[1] * 1000 + t[2] / 1000 end \
                     local stop = now() + tonumber(ARGV[1]) \
                     while now() < stop do end return 1",
                )
                .arg(0)
                .arg(ms)
                .query(&mut conn);
        })
    }

    /// A primary and one replica of it, the replica in sync (it has acknowledged a write).
    ///
    /// ```no_run
    /// let (primary, replica) = lockscript_test::server::RedisServer::with_replica();
    /// ```
    pub fn with_replica() -> (RedisServer, RedisServer) {
        let primary = RedisServer::builder()
            .arg("--repl-diskless-sync-delay")
            .arg("0")
            .start();
        let replica = RedisServer::builder()
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(primary.port().to_string())
            .start();
        let mut conn = primary.connection();
        let started = std::time::Instant::now();
        loop {
            let _: () = redis::cmd("SET")
                .arg("sync")
                .arg(1)
                .query(&mut conn)
                .expect("SET on the primary");
            let acked: usize = redis::cmd("WAIT")
                .arg(1)
                .arg(100)
                .query(&mut conn)
                .expect("WAIT on the primary");
            if acked == 1 {
                return (primary, replica);
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the replica did not catch up within 10 s"
            );
        }
    }

    /// Sends a signal to the server process by running `kill -<sig> <pid>`, e.g. `"STOP"` to
    /// freeze it and `"CONT"` to resume it (a leading `-` or a `SIG` prefix is accepted).
    ///
    /// # Panics
    ///
    /// If the server is stopped, `kill` cannot be run, or it reports failure.
    pub fn signal(&self, sig: &str) {
        assert!(
            self.child.is_some(),
            "cannot send SIG{sig} to redis-server: it is stopped"
        );
        let sig = sig.trim_start_matches('-');
        let output = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid.to_string())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run `kill -{sig} {}`: {e}", self.pid));
        assert!(
            output.status.success(),
            "`kill -{sig} {}` failed ({}): {}",
            self.pid,
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }

    /// Log tail plus captured stdout/stderr, for panic messages.
    fn diagnostics(&self) -> String {
        diagnostics(self.dir.path())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        release_port(self.port);
        if thread::panicking() && self.log_on_panic {
            eprintln!(
                "\n===== redis-server log (port {}, pid {}, dir {}; test panicked) =====\n{}\
                 ===== end of redis-server log =====",
                self.port,
                self.pid,
                self.dir.path().display(),
                self.diagnostics()
            );
        }
    }
}

/// Lowest port [`free_port`] hands out (below it sit well-known services).
const LOWEST_PORT: u16 = 10_000;
/// Room kept between a port and the kernel's ephemeral range, so that a cluster node's bus port
/// (`port + 10000`) stays out of that range too.
const BUS_PORT_ROOM: u16 = 10_000;
/// The start of the kernel's ephemeral port range when `/proc` cannot tell (Linux's default).
const DEFAULT_EPHEMERAL_LOW: u16 = 32_768;

/// A free loopback port (never 6379) that no other [`free_port`] call of this process has
/// handed out (as a port or as a cluster bus port, `port + 10000`), drawn at random from below
/// the kernel's ephemeral port range.
///
/// Why not `bind(0)`: the kernel hands ports of its ephemeral range to outgoing connections too.
/// A test that stops a server and restarts it on the same port (to simulate a crash) then loses
/// the race to any client connection that happened to get that port as its local port, and
/// redis-server exits with "Address already in use" (seen in CI). Ports below the range are only
/// ever taken by an explicit `bind`, and this process never hands one out twice.
///
/// Other processes that use this harness (a second test run, a chaos soak, `cargo nextest`'s
/// process per test) never draw a port this process holds: each port and its bus port are
/// reserved with a lock file (`lockscript-test-ports/<port>` in the temp dir, `flock`ed) until
/// [`release_port`] or the end of the process. Without it, another run could start its server
/// on the port of a server stopped here for a restart, and this harness's proxy and clients
/// would then talk to a stranger's server. Another program may still take the port before
/// redis binds it; [`ServerBuilder::start`] then retries with another port.
///
/// # Panics
///
/// If no free port is found after many draws.
#[must_use]
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::hash::{BuildHasher, RandomState};

    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let (low, high) = port_range();
    let span = u64::from(high - low) + 1;
    let seed = RandomState::new();
    for draw in 0..PORT_FILTER_ATTEMPTS {
        let offset = u16::try_from(seed.hash_one(draw) % span).expect("span fits in u16");
        let port = low + offset;
        let bus = port.saturating_add(BUS_PORT_ROOM);
        if port == DEFAULT_REDIS_PORT || TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_err() {
            continue;
        }
        // A cluster node also binds `port + 10000`: reserve that one along with the port.
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
        let handed_out = handed_out.get_or_insert_with(HashSet::new);
        if !handed_out.contains(&port) && !handed_out.contains(&bus) {
            handed_out.extend([port, bus]);
            if reserve(port) {
                if reserve(bus) {
                    return port;
                }
                release_port(port);
            }
        }
    }
    panic!("no free loopback port in {low}..={high} after {PORT_FILTER_ATTEMPTS} draws");
}

/// The lock files by which this process holds its ports against other processes.
static RESERVED: Mutex<Option<HashMap<u16, File>>> = Mutex::new(None);

/// Reserves `port` against other processes; `false` if one holds it. Where no lock file can
/// be made (an unwritable temp dir), only the bind check guards the port.
fn reserve(port: u16) -> bool {
    let dir = std::env::temp_dir().join("lockscript-test-ports");
    let file = fs::create_dir_all(&dir).and_then(|()| {
        File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(port.to_string()))
    });
    let Ok(file) = file else { return true };
    match try_lock(&file) {
        Ok(()) => {
            RESERVED
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert_with(HashMap::new)
                .insert(port, file);
            true
        }
        Err(Errno::WOULDBLOCK) => false,
        Err(_) => true,
    }
}

/// Takes `file`'s exclusive advisory lock without waiting (`flock`): held until the file
/// is closed, by this process or its end, so a crashed run leaves no stale reservation.
fn try_lock(file: &File) -> Result<(), Errno> {
    flock(file, FlockOperation::NonBlockingLockExclusive)
}

/// Gives back to other processes a port drawn by [`free_port`] (and its bus port), once no
/// server or proxy of this process listens on it; this process never draws it again.
/// [`RedisServer`] releases its own when dropped (and so do harnesses built on it).
pub fn release_port(port: u16) {
    let mut reserved = RESERVED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(reserved) = reserved.as_mut() {
        reserved.remove(&port);
        reserved.remove(&port.saturating_add(BUS_PORT_ROOM));
    }
}

/// The ports [`free_port`] draws from: from [`LOWEST_PORT`] up to [`BUS_PORT_ROOM`] below the
/// ephemeral range (or, when the range starts too low for that, every port up to
/// `65535 - BUS_PORT_ROOM`).
fn port_range() -> (u16, u16) {
    let eph_low = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(DEFAULT_EPHEMERAL_LOW);
    let below = eph_low.saturating_sub(BUS_PORT_ROOM).saturating_sub(1);
    if below >= LOWEST_PORT + 1000 {
        (LOWEST_PORT, below)
    } else {
        // The ephemeral range covers nearly everything: nothing to avoid.
        (LOWEST_PORT, u16::MAX - BUS_PORT_ROOM)
    }
}

/// A [`free_port`] for which `accept` holds.
fn free_port_where(accept: fn(u16) -> bool) -> u16 {
    for _ in 0..PORT_FILTER_ATTEMPTS {
        let port = free_port();
        if accept(port) {
            return port;
        }
        release_port(port);
    }
    panic!("no free port passed the port filter in {PORT_FILTER_ATTEMPTS} attempts");
}

/// Spawns `redis-server` on `port` and waits until it answers.
///
/// Returns `Err(diagnostics)` when the server exited because the port was already in use (the
/// caller may retry with another port); panics on every other failure.
fn launch(
    bin: &Path,
    dir: &Path,
    port: u16,
    extra_args: &[String],
    envs: &[(String, String)],
) -> Result<Child, String> {
    let output = File::options()
        .create(true)
        .append(true)
        .open(dir.join(OUTPUT_FILE))
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.join(OUTPUT_FILE).display()));
    let output_err = output
        .try_clone()
        .unwrap_or_else(|e| panic!("cannot duplicate a file handle: {e}"));

    let mut command = Command::new(bin);
    command
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join(LOG_FILE))
        .args(["--daemonize", "no"])
        .args(extra_args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(output)
        .stderr(output_err);

    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == io::ErrorKind::NotFound => panic!("{}", missing(bin, &e)),
        Err(e) => panic!("cannot spawn {}: {e}", bin.display()),
    };

    let pid = child.id();
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let diagnostics = diagnostics(dir);
                if diagnostics.contains("Address already in use") {
                    return Err(format!(
                        "port {port} already in use ({status}):\n{diagnostics}"
                    ));
                }
                panic!(
                    "redis-server on port {port} exited during startup ({status}):\n{diagnostics}"
                );
            }
            Ok(None) => {}
            Err(e) => {
                kill_and_reap(child);
                panic!(
                    "cannot poll redis-server (pid {pid}): {e}\n{}",
                    diagnostics(dir)
                );
            }
        }
        if is_ready(port, pid) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            kill_and_reap(child);
            panic!(
                "redis-server on port {port} (pid {pid}) did not answer PING within {:?} \
                 (if {BIN_ENV} is a wrapper script, it must `exec` redis-server):\n{}",
                STARTUP_TIMEOUT,
                diagnostics(dir)
            );
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// What to say when `bin` cannot be run because something is not found (`e`): which binary
/// was tried, where it was named, and what to do.
fn missing(bin: &Path, e: &io::Error) -> String {
    let from_env = std::env::var_os(BIN_ENV)
        .is_some_and(|listed| std::env::split_paths(&listed).any(|p| p == bin));
    let (named_by, what_to_do) = if from_env {
        (
            format!("named by {BIN_ENV}"),
            format!(
                "set {BIN_ENV} to the path of a redis-server or valkey-server binary \
                 (several separated by ':' for a matrix), or unset it to use redis-server \
                 from PATH"
            ),
        )
    } else {
        (
            "given to ServerBuilder::binary".to_owned(),
            "give ServerBuilder::binary the path of a redis-server or valkey-server binary"
                .to_owned(),
        )
    };
    let shown = bin.display();
    if bin == Path::new(matrix::DEFAULT_BIN) && !from_env {
        format!(
            "redis-server not found on PATH: {INSTALL_HINT}, or set {BIN_ENV} to the path of \
             a redis-server or valkey-server binary"
        )
    } else if bin.components().count() == 1 {
        format!(
            "{shown} ({named_by}) not found on PATH: put its directory on PATH, or {what_to_do}"
        )
    } else if bin.exists() {
        format!(
            "{shown} ({named_by}) exists but cannot be run ({e}): if it is a script, its \
             interpreter is missing; or {what_to_do}"
        )
    } else {
        format!("{shown} ({named_by}) does not exist: {what_to_do}")
    }
}

/// Whether the server on `port` is our process `pid` and done loading, answering within
/// [`READY_PROBE`].
fn is_ready(port: u16, pid: u32) -> bool {
    answers(port, pid, READY_PROBE)
}

/// Whether the server on `port` is our process `pid` and answers within `within`: pipelines
/// `PING` and `INFO server` over a plain TCP stream and checks for `+PONG` (not `-LOADING`
/// or `-BUSY`) and our `process_id` (not some other process that grabbed the port). Each
/// step waits only for what is left of `within`, so a server that is gone, frozen or busy
/// fails it within `within`.
fn answers(port: u16, pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
            .ok_or_else(|| io::Error::from(io::ErrorKind::TimedOut))
    };
    let probe = || -> io::Result<bool> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let mut stream = TcpStream::connect_timeout(&addr, left()?)?;
        stream.set_write_timeout(Some(left()?))?;
        stream.write_all(b"PING\r\nINFO server\r\n")?;
        let needle = format!("\r\nprocess_id:{pid}\r\n");
        let mut reply = Vec::new();
        let mut buf = [0_u8; 4096];
        loop {
            if reply.len() >= 7 && !reply.starts_with(b"+PONG\r\n") {
                return Ok(false);
            }
            if String::from_utf8_lossy(&reply).contains(&needle) {
                return Ok(true);
            }
            stream.set_read_timeout(Some(left()?))?;
            let n = stream.read(&mut buf)?;
            if n == 0 || reply.len() > 64 * 1024 {
                return Ok(false);
            }
            reply.extend_from_slice(&buf[..n]);
        }
    };
    probe().unwrap_or(false)
}

/// SIGKILL (no-op if already dead) and reap.
fn kill_and_reap(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The last [`LOG_TAIL_LINES`] lines of the log, plus anything the process wrote to
/// stdout/stderr.
fn diagnostics(dir: &Path) -> String {
    let log_path = dir.join(LOG_FILE);
    let log = read_lossy(&log_path);
    let lines: Vec<&str> = log.lines().collect();
    let skipped = lines.len().saturating_sub(LOG_TAIL_LINES);
    let mut out = format!("--- {} ", log_path.display());
    if skipped > 0 {
        let _ = write!(out, "(last {LOG_TAIL_LINES} lines; {skipped} skipped) ");
    }
    out.push_str("---\n");
    if lines.is_empty() {
        out.push_str("(empty)\n");
    }
    for line in &lines[skipped..] {
        out.push_str(line);
        out.push('\n');
    }
    let output = read_lossy(&dir.join(OUTPUT_FILE));
    if !output.trim().is_empty() {
        let _ = write!(out, "--- redis-server stdout/stderr ---\n{output}");
        if !output.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// A directory of its own under the system's temp dir, removed with what it holds on drop
/// (a server's working dir: its log, AOF and RDB files).
#[derive(Debug)]
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> io::Result<TempDir> {
        static MADE: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        for _ in 0..100 {
            let name = format!(
                "redis-test-{}-{}-{nanos}",
                std::process::id(),
                MADE.fetch_add(1, Ordering::Relaxed)
            );
            let path = std::env::temp_dir().join(name);
            match fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir(path)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("100 names taken in the temp dir"))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A file's contents (invalid UTF-8 replaced), or the empty string if it cannot be read.
fn read_lossy(path: &Path) -> String {
    fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_reports_a_taken_port() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let dir = TempDir::new().unwrap();
        let err = launch(Path::new(matrix::DEFAULT_BIN), dir.path(), port, &[], &[]).unwrap_err();
        assert!(err.contains("Address already in use"), "{err}");
        assert!(err.contains(&format!("port {port}")), "{err}");
    }

    #[test]
    fn free_port_hands_out_each_port_and_bus_port_once_below_the_ephemeral_range() {
        let (low, high) = port_range();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let port = free_port();
            assert_ne!(port, DEFAULT_REDIS_PORT);
            assert!((low..=high).contains(&port), "{port} not in {low}..={high}");
            assert!(seen.insert(port), "{port} handed out twice");
            assert!(
                seen.insert(port + BUS_PORT_ROOM),
                "{port} is the bus port of an earlier one, or the reverse"
            );
        }
    }

    #[test]
    fn a_drawn_port_is_held_against_other_processes_until_released() {
        // Another process's lock on the same file is another open file description: a
        // second open here stands in for it.
        let other = |port: u16| {
            File::options()
                .write(true)
                .open(
                    std::env::temp_dir()
                        .join("lockscript-test-ports")
                        .join(port.to_string()),
                )
                .unwrap()
        };
        let port = free_port();
        for held in [port, port + BUS_PORT_ROOM] {
            assert!(
                try_lock(&other(held)) == Err(Errno::WOULDBLOCK),
                "{held} is not held"
            );
        }
        release_port(port);
        let theirs = other(port);
        // A child that another test of this binary forks at that moment shares the lock
        // file's open description until it execs (which closes it: O_CLOEXEC), so the
        // lock can outlive the release by that window; bounded, a second at most.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while try_lock(&theirs) == Err(Errno::WOULDBLOCK) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        try_lock(&theirs).unwrap();
        // Held by "them", it is not reserved here.
        assert!(!reserve(port));
        drop(theirs);
        assert!(reserve(port));
        release_port(port);
    }

    #[test]
    fn the_port_range_leaves_the_ephemeral_range_to_outgoing_connections() {
        let (_, high) = port_range();
        if high == u16::MAX - BUS_PORT_ROOM {
            // This kernel's ephemeral range starts too low to leave room below it.
            eprintln!("ephemeral port range starts below {LOWEST_PORT}: nothing to avoid");
            return;
        }
        let outgoing = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = TcpStream::connect(outgoing.local_addr().unwrap()).unwrap();
        let local = client.local_addr().unwrap().port();
        assert!(
            local > high + BUS_PORT_ROOM,
            "an outgoing connection got port {local}, inside the test range ..={high}"
        );
    }

    /// The message of `ServerBuilder::binary(bin).start()` when `bin` cannot be found.
    fn missing_message(bin: &Path) -> String {
        let dir = TempDir::new().unwrap();
        let port = free_port();
        let panic =
            std::panic::catch_unwind(|| launch(bin, dir.path(), port, &[], &[])).unwrap_err();
        release_port(port);
        panic.downcast_ref::<String>().cloned().unwrap()
    }

    #[test]
    fn a_missing_binary_is_named_with_where_it_was_given_and_what_to_do() {
        let path = Path::new("/nonexistent/valkey-server");
        assert_eq!(
            missing_message(path),
            "/nonexistent/valkey-server (given to ServerBuilder::binary) does not exist: give \
             ServerBuilder::binary the path of a redis-server or valkey-server binary"
        );
        let bare = Path::new("no-such-server-lockscript");
        assert!(
            missing_message(bare).starts_with(
                "no-such-server-lockscript (given to ServerBuilder::binary) not found on PATH: \
                 put its directory on PATH, or give ServerBuilder::binary the path"
            ),
            "{}",
            missing_message(bare)
        );
        // A script whose interpreter is missing: the file exists, running it is ENOENT.
        let dir = TempDir::new().unwrap();
        let script = dir.path().join("redis-server");
        fs::write(&script, "#!/nonexistent/sh\n").unwrap();
        let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        fs::set_permissions(&script, executable).unwrap();
        let text = missing_message(&script);
        assert!(
            text.contains("(given to ServerBuilder::binary) exists but cannot be run"),
            "{text}"
        );
        assert!(text.contains("its interpreter is missing"), "{text}");
    }

    #[test]
    fn diagnostics_keeps_the_last_lines() {
        let dir = TempDir::new().unwrap();
        let log = (0..250)
            .map(|i| format!("line {i}"))
            .collect::<Vec<_>>()
            .join("\n");
        fs::write(dir.path().join(LOG_FILE), log).unwrap();
        let text = diagnostics(dir.path());
        assert!(text.contains("150 skipped"), "{text}");
        assert!(!text.contains("line 149\n"), "{text}");
        assert!(text.contains("line 150\n"), "{text}");
        assert!(text.contains("line 249\n"), "{text}");
    }
}
