//! Tests of the redis-server test harness itself.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use lockscript_test::server::RedisServer;

/// Whether a TCP connect to the port is refused.
fn refused(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
        Ok(_) => false,
        Err(e) => e.kind() == ErrorKind::ConnectionRefused,
    }
}

/// Whether a process with this pid exists (`kill -0`).
fn alive(pid: u32) -> bool {
    Command::new("kill")
        .arg("-0")
        .arg(pid.to_string())
        .output()
        .expect("run kill -0")
        .status
        .success()
}

fn set(con: &mut redis::Connection, key: &str, value: &str) {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .exec(con)
        .expect("SET");
}

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

fn config_get(con: &mut redis::Connection, name: &str) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(con)
        .expect("CONFIG GET");
    pair.get(1).cloned().unwrap_or_default()
}

#[test]
fn two_servers_get_different_ports_never_6379() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.port(), 6379);
    assert_ne!(b.port(), 6379);
    assert_ne!(a.pid(), b.pid());
    assert_ne!(a.dir(), b.dir());
    assert_eq!(a.url(), format!("redis://127.0.0.1:{}/", a.port()));
    // Each is really a separate server.
    set(&mut a.connection(), "who", "a");
    assert_eq!(get(&mut b.connection(), "who"), None);
}

#[test]
fn sync_set_get_against_redis_7() {
    let server = RedisServer::start();
    let mut con = server.connection();
    set(&mut con, "k", "v");
    assert_eq!(get(&mut con, "k").as_deref(), Some("v"));
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap();
    eprintln!("redis_version: {version}");
    // CLIENT SETINFO (sent by redis-rs on connect) is unknown to 7.0: the error is ignored by
    // the client, and the connection works. Show that the server does reject it.
    let setinfo: redis::RedisResult<()> = redis::cmd("CLIENT")
        .arg("SETINFO")
        .arg("LIB-NAME")
        .arg("x")
        .query(&mut con);
    if version.starts_with("7.0") {
        assert!(setinfo.is_err(), "{setinfo:?}");
    }
    // Defaults of the harness: no persistence, bound to loopback.
    assert_eq!(config_get(&mut con, "save"), "");
    assert_eq!(config_get(&mut con, "appendonly"), "no");
    assert_eq!(config_get(&mut con, "bind"), "127.0.0.1");
    assert_eq!(
        std::path::Path::new(&config_get(&mut con, "dir")),
        server.dir().canonicalize().unwrap()
    );
}

#[tokio::test]
async fn async_set_get() {
    let server = RedisServer::start();
    let mut con = server.multiplexed().await;
    redis::cmd("SET")
        .arg("k")
        .arg("async")
        .exec_async(&mut con)
        .await
        .unwrap();
    let v: String = redis::cmd("GET")
        .arg("k")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(v, "async");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_set_get_multi_thread_runtime() {
    let server = RedisServer::start();
    let mut con = server.multiplexed().await;
    let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn log_has_ready_line() {
    let server = RedisServer::start();
    assert!(
        server.log().contains("Ready to accept connections"),
        "{}",
        server.log()
    );
    assert!(server.dir().join("redis.log").exists());
}

#[test]
fn drop_kills_the_process_and_frees_the_port() {
    let server = RedisServer::start();
    let (port, pid) = (server.port(), server.pid());
    let dir = server.dir().to_path_buf();
    assert!(!refused(port));
    assert!(alive(pid));
    drop(server);
    assert!(refused(port), "port {port} still accepts connections");
    assert!(!alive(pid), "pid {pid} still exists");
    assert!(!dir.exists(), "temp dir {} not removed", dir.display());
}

#[test]
fn stop_restart_keeps_port_and_loses_data() {
    let mut server = RedisServer::start();
    let (port, pid) = (server.port(), server.pid());
    set(&mut server.connection(), "k", "v");
    server.stop();
    assert!(refused(port));
    assert!(!alive(pid));
    assert!(server.dir().exists());
    server.stop(); // idempotent
    server.restart();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    assert_eq!(get(&mut server.connection(), "k"), None);
    // Restart while running also works (stops first).
    let pid2 = server.pid();
    server.restart();
    assert!(!alive(pid2));
    assert_eq!(server.port(), port);
    set(&mut server.connection(), "after", "restart");
}

#[tokio::test]
async fn async_connection_after_restart() {
    let mut server = RedisServer::start();
    let mut con = server.multiplexed().await;
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .exec_async(&mut con)
        .await
        .unwrap();
    server.stop();
    // The old connection is dead.
    let err = redis::cmd("PING").query_async::<String>(&mut con).await;
    assert!(err.is_err());
    server.restart();
    let mut con = server.multiplexed().await;
    let v: Option<String> = redis::cmd("GET")
        .arg("k")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(v, None);
}

#[test]
fn aof_always_survives_stop_restart() {
    let mut server = RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .arg("--appendfsync")
        .arg("always")
        .start();
    let mut con = server.connection();
    assert_eq!(config_get(&mut con, "appendonly"), "yes");
    assert_eq!(config_get(&mut con, "appendfsync"), "always");
    for i in 0..100 {
        set(&mut con, &format!("k{i}"), &format!("v{i}"));
    }
    drop(con);
    let port = server.port();
    server.stop();
    // Redis 7.0 and later keep the AOF in a directory; 6.2 in one file.
    assert!(
        server.dir().join("appendonlydir").exists() || server.dir().join("appendonly.aof").exists()
    );
    server.restart();
    assert_eq!(server.port(), port);
    let mut con = server.connection();
    for i in 0..100 {
        assert_eq!(get(&mut con, &format!("k{i}")), Some(format!("v{i}")));
    }
}

#[test]
fn signal_stop_and_cont() {
    let server = RedisServer::start();
    let mut con = server.connection();
    set(&mut con, "k", "v");
    server.signal("STOP");
    // A frozen server accepts the TCP connection (kernel backlog) but never answers.
    let mut raw = TcpStream::connect((Ipv4Addr::LOCALHOST, server.port())).unwrap();
    raw.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    raw.write_all(b"PING\r\n").unwrap();
    let mut buf = [0_u8; 16];
    let err = raw.read(&mut buf).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err:?}"
    );
    server.signal("-CONT");
    let n = raw.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"+PONG\r\n");
    assert_eq!(get(&mut con, "k").as_deref(), Some("v"));
}

/// `answers_ping` tells a serving server from a frozen or shut-down one, and returns
/// within the time it is given even when the server never answers.
#[test]
fn answers_ping_is_false_for_a_frozen_or_shut_down_server_within_its_bound() {
    let within = Duration::from_millis(300);
    let server = RedisServer::start();
    assert!(server.answers_ping(within));
    server.signal("STOP");
    let started = std::time::Instant::now();
    assert!(!server.answers_ping(within));
    let took = started.elapsed();
    // The probe's own steps after the deadline: a few system calls.
    assert!(took <= within + Duration::from_millis(50), "{took:?}");
    server.signal("CONT");
    assert!(server.answers_ping(within));
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN")
        .arg("NOSAVE")
        .query(&mut server.connection());
    assert!(server.is_running(), "its process is still ours to reap");
    assert!(!server.answers_ping(within));
}

#[test]
fn drop_while_stopped_with_sigstop_still_kills() {
    let server = RedisServer::start();
    let (port, pid) = (server.port(), server.pid());
    server.signal("STOP");
    drop(server);
    assert!(!alive(pid));
    assert!(refused(port));
}

#[test]
fn bad_argument_panics_with_the_servers_output() {
    let err = std::panic::catch_unwind(|| {
        RedisServer::builder()
            .arg("--no-such-option")
            .arg("1")
            .start()
    })
    .unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("exited during startup"), "{msg}");
    assert!(msg.contains("no-such-option"), "{msg}");
}

/// Runs one `#[ignore]`d helper test of this binary in a child process, with extra env.
fn run_helper(name: &str, env: &[(&str, &str)]) -> (bool, String) {
    let mut command = lockscript_test::ignored_test_process(name);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
#[ignore = "helper, run by the tests of a missing binary"]
fn helper_start_server() {
    let _server = RedisServer::start();
}

/// A `REDIS_SERVER_BIN` that names no file: the message says that path does not exist and
/// what to set instead, not that redis-server is missing from `PATH`.
#[test]
fn a_server_bin_that_does_not_exist_is_named_with_what_to_do() {
    let (ok, text) = run_helper(
        "helper_start_server",
        &[("REDIS_SERVER_BIN", "/nonexistent/redis-server")],
    );
    assert!(!ok, "{text}");
    assert!(
        text.contains(
            "/nonexistent/redis-server (named by REDIS_SERVER_BIN) does not exist: set \
             REDIS_SERVER_BIN to the path of a redis-server or valkey-server binary"
        ),
        "{text}"
    );
    assert!(!text.contains("not found on PATH"), "{text}");
}

/// No `REDIS_SERVER_BIN` and no redis-server on `PATH`: the message says how to install it.
#[test]
fn without_redis_server_on_path_the_message_names_the_install_command() {
    let out = lockscript_test::ignored_test_process("helper_start_server")
        .env_remove("REDIS_SERVER_BIN")
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains(
            "redis-server not found on PATH: install it with `apt-get install -y redis-server` \
             (Debian/Ubuntu) or `brew install redis`, or set REDIS_SERVER_BIN to the path of a \
             redis-server or valkey-server binary"
        ),
        "{text}"
    );
}

#[test]
#[ignore = "helper, run by panicking_test_prints_the_log"]
fn helper_panic_with_server() {
    let _server = RedisServer::start();
    assert!(
        std::env::var_os("HARNESS_HELPER_PANIC").is_none(),
        "deliberate failure"
    );
}

#[test]
fn panicking_test_prints_the_log() {
    let (ok, text) = run_helper("helper_panic_with_server", &[("HARNESS_HELPER_PANIC", "1")]);
    assert!(!ok, "{text}");
    assert!(text.contains("===== redis-server log"), "{text}");
    assert!(text.contains("Ready to accept connections"), "{text}");
    assert!(text.contains("deliberate failure"), "{text}");
    // And a passing test prints nothing of the sort.
    let (ok, text) = run_helper("helper_panic_with_server", &[]);
    assert!(ok, "{text}");
    assert!(!text.contains("===== redis-server log"), "{text}");
}

#[test]
fn many_servers_in_parallel() {
    let handles: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(|| {
                let server = RedisServer::start();
                set(&mut server.connection(), "k", "v");
                server.port()
            })
        })
        .collect();
    let mut ports: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    ports.sort_unstable();
    ports.dedup();
    assert!(ports.iter().all(|&p| p != 6379));
}

/// The proxy can hold back the requests of one connection alone: its commands reach the
/// server after those another connection sent later (the chaos checker's fault that
/// reorders a handle's two connections).
#[test]
fn the_proxy_delays_one_connection_and_not_the_others() {
    let server = RedisServer::start();
    let proxy = lockscript_test::proxy::Proxy::start(server.port());
    let client = redis::Client::open(proxy.url()).unwrap();
    let mut slow = client.get_connection().unwrap();
    let mut fast = client.get_connection().unwrap();
    let ping = |c: &mut redis::Connection| {
        let started = std::time::Instant::now();
        let _: String = redis::cmd("PING").query(c).unwrap();
        started.elapsed()
    };
    ping(&mut slow);
    ping(&mut fast);
    let delay = Duration::from_millis(300);
    assert!(proxy.delay_one_connection(0, delay));
    let (a, b) = (ping(&mut slow), ping(&mut fast));
    assert!(
        a.max(b) >= delay && a.min(b) < delay,
        "one delayed, the other not: {a:?} {b:?}"
    );
    assert!(proxy.delay_one_connection(0, Duration::ZERO));
    assert!(ping(&mut slow) < delay && ping(&mut fast) < delay);
}

/// `busy_for` keeps the server from answering for about the time asked, on every server
/// of the matrix: a `PING` sent once the script runs waits for most of it, and the
/// script is over well before the server's busy-script threshold (5 s). On Valkey 9,
/// where `TIME` inside a script is the time the script started, a loop on `TIME` ran
/// until that threshold: a chaos soak's 100..1000 ms fault lasted 5 s there.
#[test]
fn busy_for_keeps_the_server_busy_for_about_the_time_asked() {
    let server = RedisServer::start();
    let mut probe = server.connection();
    let asked = Duration::from_millis(400);
    let started = std::time::Instant::now();
    let busy = server.busy_for(asked);
    // The script has started once the server stops answering; PING until then.
    std::thread::sleep(Duration::from_millis(50));
    let _: String = redis::cmd("PING").query(&mut probe).expect("PING");
    let answered = started.elapsed();
    busy.join().expect("the busy thread");
    let ended = started.elapsed();
    assert!(
        answered + Duration::from_millis(100) >= asked,
        "the server answered after {answered:?}: not busy for the {asked:?} asked"
    );
    assert!(
        ended <= asked + Duration::from_millis(1_500),
        "busy for {ended:?} when {asked:?} was asked"
    );
}
