//! The key positions of the command table against the servers themselves: for calls
//! written with literals only, every position `Command::keys_in` says is certainly a key
//! is one the server's `COMMAND GETKEYS` returns. That is what keeps the literal-key
//! error of `#[lock_script]` and `lockscript audit` from flagging what is not a key.
//!
//! Each server of `REDIS_SERVER_BIN` (a `:`-separated list; `redis-server` when unset)
//! is started on a Unix socket in a temp dir, as the CLI's tests do.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockscript_audit::commands::{self, Argument};

/// A private server, killed on drop.
struct Server {
    child: Child,
    dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Server {
    fn start(bin: PathBuf) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("keys-redis-")
            .tempdir()
            .unwrap();
        let child = Command::new(&bin)
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(dir.path().join("redis.sock"))
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let mut server = Server { child, dir, bin };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server.dir.path().join("redis.sock").exists() {
            assert!(
                server.child.try_wait().unwrap().is_none(),
                "{} exited during startup",
                server.bin.display()
            );
            assert!(
                Instant::now() < deadline,
                "{} did not start",
                server.bin.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn connection(&self) -> redis::Connection {
        let url = format!(
            "redis+unix://{}",
            self.dir.path().join("redis.sock").display()
        );
        let client = redis::Client::open(url).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match client.get_connection() {
                Ok(conn) => return conn,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("cannot connect to {}: {e}", self.bin.display()),
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binaries() -> Vec<PathBuf> {
    let list = std::env::var_os("REDIS_SERVER_BIN").unwrap_or_default();
    let found: Vec<PathBuf> = std::env::split_paths(&list)
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    if found.is_empty() {
        vec!["redis-server".into()]
    } else {
        found
    }
}

/// Calls with a key at known places, each argument written once so a key the server
/// returns names its position: the table's `COMMAND|SUB` name, then the call.
const CALLS: &[(&str, &[&str])] = &[
    ("GET", &["GET", "k1"]),
    ("SET", &["SET", "k1", "v1", "PX", "100"]),
    ("MSET", &["MSET", "k1", "v1", "k2", "v2"]),
    ("DEL", &["DEL", "k1", "k2", "k3"]),
    ("BLPOP", &["BLPOP", "k1", "k2", "0"]),
    ("BITOP", &["BITOP", "AND", "d1", "s1", "s2"]),
    ("LCS", &["LCS", "a1", "b1"]),
    (
        "ZUNIONSTORE",
        &["ZUNIONSTORE", "d1", "2", "s1", "s2", "WEIGHTS", "1", "3"],
    ),
    ("ZINTERCARD", &["ZINTERCARD", "2", "s1", "s2", "LIMIT", "5"]),
    ("LMPOP", &["LMPOP", "2", "l1", "l2", "LEFT"]),
    (
        "XREAD",
        &["XREAD", "COUNT", "5", "STREAMS", "x1", "x2", "0-0", "0-1"],
    ),
    (
        "XREADGROUP",
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "COUNT",
            "1",
            "STREAMS",
            "x1",
            ">",
        ],
    ),
    (
        "GEORADIUS",
        &["GEORADIUS", "g1", "0", "0", "1", "km", "STORE", "d1"],
    ),
    ("SORT", &["SORT", "s1", "BY", "nosort", "STORE", "d1"]),
    ("OBJECT|ENCODING", &["OBJECT", "ENCODING", "o1"]),
    ("XINFO|STREAM", &["XINFO", "STREAM", "x1"]),
    ("MEMORY|USAGE", &["MEMORY", "USAGE", "m1", "SAMPLES", "5"]),
    ("EVAL", &["EVAL", "return 1", "2", "e1", "e2", "a1"]),
    ("MSETEX", &["MSETEX", "2", "k1", "v1", "k2", "v2"]),
    ("MIGRATE", &["MIGRATE", "h", "1", "m0", "0", "5000"]),
    // MIGRATE's `""` stands where its key would be when KEYS follows: not a key (and
    // the keys after KEYS, found by a search backwards, are not certain).
    (
        "MIGRATE",
        &["MIGRATE", "h", "1", "", "0", "5000", "KEYS", "m1", "m2"],
    ),
];

#[test]
fn every_position_the_table_calls_a_key_is_one_the_server_returns() {
    for bin in binaries() {
        let server = Server::start(bin.clone());
        let mut conn = server.connection();
        let mut compared = 0;
        for (name, words) in CALLS {
            let command =
                commands::find(name).unwrap_or_else(|| panic!("{name} is not in the table"));
            let call: Vec<Argument> = words
                .iter()
                .map(|w| {
                    if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) {
                        Argument::Number((*w).to_owned())
                    } else {
                        Argument::Text((*w).to_owned())
                    }
                })
                .collect();
            let ours = command.keys_in(&call, false);
            let reply: redis::RedisResult<Vec<String>> = redis::cmd("COMMAND")
                .arg("GETKEYS")
                .arg(*words)
                .query(&mut conn);
            let theirs: Vec<usize> = match reply {
                Ok(keys) => (0..words.len())
                    .filter(|&i| keys.iter().any(|k| k == words[i]))
                    .collect(),
                // A command this server does not have.
                Err(e) if e.to_string().contains("Invalid command specified") => continue,
                Err(e) => panic!("{}: COMMAND GETKEYS {words:?}: {e}", bin.display()),
            };
            assert!(
                !ours.is_empty() || words.contains(&""),
                "{name}: the table finds no key in {words:?}"
            );
            assert!(
                ours.iter().all(|i| theirs.contains(i)),
                "{}: {words:?}: the table says keys at {ours:?}, the server at {theirs:?}",
                bin.display()
            );
            compared += 1;
        }
        // Every server of the matrix has most of them (6.2 lacks the 7.0 ones).
        assert!(
            compared >= 15,
            "{}: only {compared} compared",
            bin.display()
        );
    }
}
