//! A server's wall clock the nemesis can move: the server runs under libfaketime (the
//! Debian package `faketime`), which reads the offset from a control file on every
//! time call (`FAKETIME_NO_CACHE=1`), and leaves the monotonic clock alone
//! (`DONT_FAKE_MONOTONIC=1`). What the offset moves is what Redis dates by the wall
//! clock: key expiry (leases, fencing counters), `TIME` (a counter that restarts, the
//! fair queue's holder leases), the cluster bus's timers.
//!
//! libfaketime cannot start inside a process whose allocator is jemalloc (as Debian's
//! redis-server's is): jemalloc reads the clock while libfaketime is still resolving its
//! own symbols, and libfaketime gives up (libfaketime issue #130). So glibc's allocator is
//! preloaded before it (`libc_malloc_debug.so.0`, glibc's malloc behind debugging hooks
//! that stay off unless asked for): the server then allocates with glibc, which reads no
//! clock. Nothing the chaos checker looks at depends on the allocator.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::server::ServerBuilder;

/// Where the libraries may be (Debian and Ubuntu, x86-64 and arm64, then the generic
/// ones).
const LIB_DIRS: [&str; 5] = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib",
];

const INSTALL_HINT: &str = "libfaketime not found: the chaos checker's clock jumps need it \
     (`apt-get install -y faketime`, which `./run chaos` does when it is missing)";

/// The preloads that put a server on a movable clock: glibc's allocator, then
/// libfaketime (its thread-safe build).
fn preloads() -> Option<String> {
    let find = |names: &[&str]| {
        LIB_DIRS.iter().find_map(|dir| {
            names
                .iter()
                .map(|name| Path::new(dir).join(name))
                .find(|p| p.is_file())
        })
    };
    let faketime = find(&["faketime/libfaketimeMT.so.1", "faketime/libfaketime.so.1"])?;
    let malloc = find(&["libc_malloc_debug.so.0"])?;
    Some(format!("{} {}", malloc.display(), faketime.display()))
}

/// Whether libfaketime (and the allocator it needs beside it) is installed.
pub fn available() -> bool {
    preloads().is_some()
}

/// One server's clock: its control file.
#[derive(Clone, Debug)]
pub struct ServerClock {
    control: PathBuf,
    offset_ms: i64,
}

impl ServerClock {
    /// A clock with its control file at `control`, at offset zero.
    ///
    /// # Panics
    ///
    /// If the file cannot be written.
    pub fn new(control: PathBuf) -> Self {
        let clock = Self {
            control,
            offset_ms: 0,
        };
        clock.write(0);
        clock
    }

    /// `builder`, set to run its server on this clock.
    ///
    /// # Panics
    ///
    /// If libfaketime is not installed (the message says how to install it).
    pub fn apply(&self, builder: ServerBuilder) -> ServerBuilder {
        self.env()
            .into_iter()
            .fold(builder, |builder, (name, value)| builder.env(name, value))
    }

    /// `command`, set to run its process on this clock: a client whose wall clock the
    /// test steps (its monotonic clock stays the real one, as a system's does when NTP
    /// or an operator steps the wall clock).
    ///
    /// # Panics
    ///
    /// If libfaketime is not installed (the message says how to install it).
    pub fn apply_to_process(&self, command: &mut std::process::Command) {
        for (name, value) in self.env() {
            command.env(name, value);
        }
    }

    /// The environment that puts a process on this clock.
    fn env(&self) -> [(&'static str, String); 5] {
        let preload = preloads().unwrap_or_else(|| panic!("{INSTALL_HINT}"));
        [
            ("LD_PRELOAD", preload),
            (
                "FAKETIME_TIMESTAMP_FILE",
                self.control.to_string_lossy().into_owned(),
            ),
            ("FAKETIME_NO_CACHE", "1".to_owned()),
            ("DONT_FAKE_MONOTONIC", "1".to_owned()),
            // An absolute time in the control file is read in the local zone.
            ("TZ", "UTC".to_owned()),
        ]
    }

    /// The offset now, in milliseconds (positive: ahead of the real time).
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms
    }

    /// Moves the clock to `offset_ms` from the real time; takes effect at the server's next
    /// time call. The file is replaced whole (a rename), so the server never reads half
    /// of it.
    ///
    /// # Panics
    ///
    /// If the file cannot be written.
    pub fn set(&mut self, offset_ms: i64) {
        self.write(offset_ms);
        self.offset_ms = offset_ms;
    }

    /// Stops the clock at `unix_us` (microseconds since the Unix epoch, UTC): it reads
    /// that until moved again, so a test can run a server's steps at instants it chooses
    /// (key expiry and `TIME` both follow). The offset no longer applies.
    ///
    /// # Panics
    ///
    /// If the file cannot be written.
    pub fn freeze_at(&mut self, unix_us: u64) {
        self.put(&frozen(unix_us));
    }

    fn write(&self, offset_ms: i64) {
        self.put(&spec(offset_ms));
    }

    fn put(&self, spec: &str) {
        let tmp = self.control.with_extension("new");
        std::fs::write(&tmp, format!("{spec}\n"))
            .and_then(|()| std::fs::rename(&tmp, &self.control))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", self.control.display()));
    }
}

/// libfaketime's absolute time, `2026-11-28 00:00:00.250000`, for `unix_us` (read in
/// the process's time zone: the processes on this clock run with `TZ=UTC`).
fn frozen(unix_us: u64) -> String {
    let secs = unix_us / 1_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:06}",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60,
        unix_us % 1_000_000
    )
}

/// libfaketime's relative offset: `+1.250` or `-0.040` seconds.
fn spec(offset_ms: i64) -> String {
    let sign = if offset_ms < 0 { '-' } else { '+' };
    let abs = Duration::from_millis(offset_ms.unsigned_abs());
    format!("{sign}{}.{:03}", abs.as_secs(), abs.subsec_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::RedisServer;

    #[test]
    fn a_frozen_instant_is_written_as_a_utc_date() {
        assert_eq!(frozen(1_795_824_000_250_000), "2026-11-28 00:00:00.250000");
        assert_eq!(frozen(951_782_400_000_001), "2000-02-29 00:00:00.000001");
        assert_eq!(frozen(1_795_910_399_999_999), "2026-11-28 23:59:59.999999");
    }

    #[test]
    fn offsets_are_written_as_libfaketime_reads_them() {
        assert_eq!(spec(0), "+0.000");
        assert_eq!(spec(1_250), "+1.250");
        assert_eq!(spec(-40), "-0.040");
    }

    fn server_time_ms(server: &RedisServer) -> i64 {
        let (secs, micros): (i64, i64) =
            redis::cmd("TIME").query(&mut server.connection()).unwrap();
        secs * 1_000 + micros / 1_000
    }

    fn real_ms() -> i64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        i64::try_from(now.as_millis()).unwrap()
    }

    /// What `read` gives once it falls in `range`, or after 2 s: some servers (Valkey 9.1)
    /// take a moment to read the new offset.
    fn settled(read: impl Fn() -> i64, range: std::ops::Range<i64>) -> i64 {
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            let value = read();
            if range.contains(&value) || std::time::Instant::now() >= give_up {
                return value;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The server's wall clock follows the file both ways, and a lease on it shortens
    /// by a forward jump: what the nemesis relies on.
    #[test]
    fn a_server_on_the_clock_follows_the_control_file() {
        if !available() {
            eprintln!("{INSTALL_HINT}: skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut clock = ServerClock::new(dir.path().join("clock"));
        let server = clock.apply(RedisServer::builder()).start();
        assert!((server_time_ms(&server) - real_ms()).abs() < 200);
        let _: () = redis::cmd("SET")
            .arg("lease")
            .arg("x")
            .arg("PX")
            .arg(5_000)
            .query(&mut server.connection())
            .unwrap();
        clock.set(3_000);
        let ahead = settled(|| server_time_ms(&server) - real_ms(), 2_800..3_200);
        assert!((2_800..3_200).contains(&ahead), "{ahead} ms ahead");
        let pttl: i64 = redis::cmd("PTTL")
            .arg("lease")
            .query(&mut server.connection())
            .unwrap();
        assert!(pttl <= 2_000, "the lease lost the jump: {pttl} ms left");
        clock.set(-1_500);
        let behind = settled(|| real_ms() - server_time_ms(&server), 1_300..1_700);
        assert!((1_300..1_700).contains(&behind), "{behind} ms behind");
        assert_eq!(clock.offset_ms(), -1_500);
    }
}
