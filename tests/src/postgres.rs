//! A private PostgreSQL server for one test, like [`RedisServer`](crate::server::RedisServer):
//! its own data directory (`initdb`), a free loopback port below the ephemeral range, no
//! durability settings a test does not need, and killed when dropped (its log printed if the
//! test panicked). Never a shared server.
//!
//! The binaries come from `PG_BIN_DIR` if set, else `PATH` (`initdb`, `postgres`), else the
//! newest `/usr/lib/postgresql/<version>/bin` (where Debian's `postgresql` package puts
//! them). PostgreSQL refuses to run as root; as root the server runs as the `postgres`
//! user (which that package creates), owning its data directory.
//!
//! ```no_run
//! use lockscript_test::postgres::PostgresServer;
//!
//! let pg = PostgresServer::start();
//! println!("connect with: {}", pg.connection_string());
//! ```

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::server::{free_port, release_port};

/// Environment variable naming the directory of `initdb` and `postgres`.
pub const BIN_DIR_ENV: &str = "PG_BIN_DIR";
/// The database user and database the server is made with.
pub const USER: &str = "postgres";
/// How long the server may take to accept connections.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
const LOG_FILE: &str = "postgres.log";
const INSTALL_HINT: &str = "PostgreSQL not found (initdb, postgres): install it with \
     `apt-get install -y postgresql` (Debian/Ubuntu), or set PG_BIN_DIR to its bin directory";

/// A running private PostgreSQL server; killed and its directory removed on drop.
pub struct PostgresServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
}

impl PostgresServer {
    /// Makes a data directory and starts the server on a free port; returns once it
    /// accepts connections.
    ///
    /// # Panics
    ///
    /// If PostgreSQL is not installed (the message says how to install it), `initdb`
    /// fails, or the server does not accept connections within 30 s (with its log).
    #[must_use]
    pub fn start() -> PostgresServer {
        let bin = bin_dir().unwrap_or_else(|| panic!("{INSTALL_HINT}"));
        let dir = tempfile::Builder::new()
            .prefix("postgres-test-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temp dir for PostgreSQL: {e}"));
        let owner = run_as();
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("cannot give the data dir to `postgres`: {e}"));
        }
        let data = dir.path().join("data");
        let out = as_owner(Command::new(bin.join("initdb")), owner)
            .args([
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
                "--username",
                USER,
            ])
            .arg("--pgdata")
            .arg(&data)
            .output()
            .unwrap_or_else(|e| panic!("cannot run initdb: {e}"));
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let port = free_port();
        let log = fs::File::create(dir.path().join(LOG_FILE))
            .unwrap_or_else(|e| panic!("cannot create the PostgreSQL log: {e}"));
        if let Some((uid, gid)) = owner {
            let _ = std::os::unix::fs::chown(dir.path().join(LOG_FILE), Some(uid), Some(gid));
        }
        let child = as_owner(Command::new(bin.join("postgres")), owner)
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", dir.path().display()))
            // A test database: nothing needs to survive a crash of the machine.
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start postgres: {e}"));
        let mut server = PostgresServer {
            child: Some(child),
            port,
            dir,
        };
        server.wait_ready(&bin);
        server
    }

    /// Whether PostgreSQL is installed where [`start`](Self::start) looks for it.
    #[must_use]
    pub fn available() -> bool {
        bin_dir().is_some()
    }

    /// The server's port on 127.0.0.1.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A libpq connection string for the `postgres` database as user `postgres`, e.g. for
    /// `tokio_postgres::connect(&pg.connection_string(), NoTls)`.
    #[must_use]
    pub fn connection_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={USER} dbname={USER}",
            self.port
        )
    }

    /// The server's log so far.
    #[must_use]
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join(LOG_FILE)).unwrap_or_default()
    }

    fn wait_ready(&mut self, bin: &Path) {
        let started = Instant::now();
        let pg_isready = bin.join("pg_isready");
        assert!(
            pg_isready.is_file(),
            "{} is missing: {INSTALL_HINT}",
            pg_isready.display()
        );
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("postgres exited during startup ({status}):\n{}", self.log());
            }
            let ready = Command::new(&pg_isready)
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            assert!(
                started.elapsed() < STARTUP_TIMEOUT,
                "postgres did not accept connections within {STARTUP_TIMEOUT:?}:\n{}",
                self.log()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        release_port(self.port);
        if thread::panicking() {
            eprintln!(
                "\n===== postgres log (port {}) =====\n{}===== end of postgres log =====",
                self.port,
                self.log()
            );
        }
    }
}

/// Where `initdb` and `postgres` are, if anywhere.
fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV) {
        return Some(PathBuf::from(dir));
    }
    // Through symbolic links to the installation's own directory, which has the other
    // tools (pg_isready) too.
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|p| p.join("initdb").is_file() && p.join("postgres").is_file())
            .and_then(|p| fs::canonicalize(p.join("postgres")).ok())
            .and_then(|p| p.parent().map(Path::to_path_buf))
    });
    on_path.or_else(|| {
        let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(Result::ok)
            .filter_map(|e| {
                let version = e.file_name().to_str()?.parse().ok()?;
                let bin = e.path().join("bin");
                bin.join("postgres").is_file().then_some((version, bin))
            })
            .collect();
        versions.sort();
        versions.pop().map(|(_, bin)| bin)
    })
}

/// The user and group to run PostgreSQL as: `postgres` when this process is root.
fn run_as() -> Option<(u32, u32)> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    let found = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&USER) && fields.len() > 3)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    });
    Some(found.unwrap_or_else(|| {
        panic!(
            "running as root, and PostgreSQL refuses root: no `postgres` user to run it as \
             (the Debian package creates one; or run the tests as another user)"
        )
    }))
}

fn as_owner(mut cmd: Command, owner: Option<(u32, u32)>) -> Command {
    if let Some((uid, gid)) = owner {
        cmd.uid(uid).gid(gid);
    }
    cmd
}
