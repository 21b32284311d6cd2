//! The pool of `TestRedis` servers, alone in its test binary so that no other test takes
//! a server from the pool in between.

use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use lockscript_test::TestRedis;
use lockscript_test::fixtures::bump;
use lockscript_test::server::RedisServer;
use redis::Commands;

/// The tests of this binary that take servers from the pool run one at a time: each reads
/// what the one before it left there.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

#[test]
fn a_pooled_server_is_reused_empty_with_its_scripts_and_zeroed_counters() {
    let _serial = serial();
    // Two at once, as two tests running in parallel take them.
    let first = TestRedis::start();
    let second = TestRedis::start();
    let ports = [port(&first), port(&second)];
    // Redis 6.2 has no functions to leave behind.
    let functions = lockscript_test::has_functions(&mut first.connection());
    for redis in [&first, &second] {
        redis.exec("SET leftover 1");
        if functions {
            redis.exec("FUNCTION LOAD \"#!lua name=lib\\nredis.register_function('f', function() return 1 end)\"");
        }
        let _: i64 = bump("c", 1).invoke(&mut redis.connection()).unwrap();
    }
    drop((first, second));
    let again = [TestRedis::start(), TestRedis::start()];
    for redis in &again {
        assert!(ports.contains(&port(redis)), "a new server was started");
        let mut conn = redis.connection();
        let keys: Vec<String> = conn.keys("*").unwrap();
        assert!(keys.is_empty(), "{keys:?}");
        if functions {
            let left: Vec<redis::Value> =
                redis::cmd("FUNCTION").arg("LIST").query(&mut conn).unwrap();
            assert!(left.is_empty(), "{left:?}");
        }
        assert_eq!(redis.command_calls("evalsha"), 0);
    }
}

fn port(redis: &TestRedis) -> u16 {
    redis.server().expect("a private server").port()
}

/// `TestRedis::start()`, on another thread so that a start that hangs fails the test
/// instead of hanging it; with how long it took. Panics if it took longer than `bound`.
fn start_within(bound: Duration) -> (TestRedis, Duration) {
    let (sent, took) = mpsc::channel();
    thread::spawn(move || {
        let started = Instant::now();
        let redis = TestRedis::start();
        let _ = sent.send((redis, started.elapsed()));
    });
    match took.recv_timeout(bound) {
        Ok(done) => done,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("TestRedis::start() took longer than {bound:?} (and still runs)")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            panic!("TestRedis::start() panicked (its message is above)")
        }
    }
}

/// What taking a server from the pool may cost when the pooled one is dead or frozen: the
/// bound of its `PING` plus a fresh server's start (measured here, now) and its set-up.
fn replacement_bound() -> Duration {
    let started = Instant::now();
    drop(RedisServer::start());
    // The set-up (FLUSHALL, the scripts) and the machine's scheduling: a few ms each,
    // given room on a loaded machine.
    TestRedis::PING_BOUND + started.elapsed() + Duration::from_millis(300)
}

/// Whether process `pid` exists (a reaped process does not).
fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The next test gets a server that works, whatever the test before it did to its own.
fn assert_works(redis: &TestRedis, not: u32) {
    let server = redis.server().expect("a private server");
    assert_ne!(server.pid(), not, "the pooled server was handed out again");
    let mut conn = redis.connection();
    let () = conn.set("k", "v").unwrap();
    assert_eq!(conn.get::<_, String>("k").unwrap(), "v");
    assert_eq!(bump("c", 2).invoke(&mut conn).unwrap(), 2);
}

#[test]
fn a_pooled_server_a_test_shut_down_is_replaced() {
    let _serial = serial();
    let redis = TestRedis::start();
    let pid = redis.server().expect("a private server").pid();
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN")
        .arg("NOSAVE")
        .query(&mut redis.connection());
    drop(redis);
    let bound = replacement_bound();
    let (next, took) = start_within(bound);
    assert!(
        took <= bound,
        "the next set-up took {took:?}, over {bound:?}"
    );
    assert_works(&next, pid);
}

#[test]
fn a_pooled_server_a_test_froze_is_killed_and_replaced_within_the_ping_bound() {
    let _serial = serial();
    let redis = TestRedis::start();
    let pid = redis.server().expect("a private server").pid();
    redis.server().expect("a private server").signal("STOP");
    drop(redis);
    let bound = replacement_bound();
    let (next, took) = start_within(bound);
    assert!(
        took <= bound,
        "the next set-up took {took:?}, over {bound:?}"
    );
    assert_works(&next, pid);
    assert!(!exists(pid), "the frozen server {pid} was left behind");
}

/// Set in the child process of the test below.
const CHILD_ENV: &str = "LOCKSCRIPT_TEST_POOL_CHILD";

/// In the child: takes a pooled server, gives it back, prints its pid and directory, and
/// exits without running any destructor. In a normal run: nothing.
#[test]
fn pool_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let redis = TestRedis::start();
    let server = redis.server().expect("a private server");
    println!("pid={} dir={}", server.pid(), server.dir().display());
    drop(redis);
    std::process::exit(0);
}

#[test]
fn a_pooled_server_dies_with_the_process_that_started_it() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "pool_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("pid=").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no pid in the child's output:\n{stdout}"));
    let (pid, dir) = line.split_once(" dir=").unwrap();
    let started = std::time::Instant::now();
    while std::path::Path::new(&format!("/proc/{pid}")).exists()
        || std::path::Path::new(dir).exists()
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "redis-server {pid} (dir {dir}) outlived its test process by 5 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Set in the children of the server-log tests: which failure to stage.
const FAIL_ENV: &str = "LOCKSCRIPT_POOL_FAIL_CHILD";

/// In the child: a plain assertion fails while the server is healthy.
#[lockscript_test::test]
fn failing_child_with_a_healthy_server(conn: &mut redis::Connection) {
    if std::env::var(FAIL_ENV).as_deref() != Ok("healthy") {
        return;
    }
    let _: () = redis::cmd("SET").arg("k").arg("v").query(conn).unwrap();
    assert_eq!(1 + 1, 3, "the test's own assertion");
}

/// In the child: the server dies (SHUTDOWN NOSAVE), then the test fails.
#[lockscript_test::test]
fn failing_child_whose_server_died(conn: &mut redis::Connection) {
    if std::env::var(FAIL_ENV).as_deref() != Ok("dead") {
        return;
    }
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg("NOSAVE").query(conn);
    let reply: redis::RedisResult<String> = redis::cmd("PING").query(conn);
    assert!(reply.is_ok(), "the server stopped answering: {reply:?}");
}

/// The child's stderr when it runs test `name` with the failure `staged`.
fn failing_child_stderr(name: &str, staged: &str) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(FAIL_ENV, staged)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the child test {name} failed as staged"
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_failed_assertion_with_a_healthy_server_prints_no_server_log() {
    let stderr = failing_child_stderr("failing_child_with_a_healthy_server", "healthy");
    assert!(stderr.contains("the test's own assertion"), "{stderr}");
    assert!(
        !stderr.contains("===== redis-server log"),
        "the log of a server that answered is left out:\n{stderr}"
    );
    assert!(stderr.contains("answered PING"), "{stderr}");
}

#[test]
fn a_test_whose_server_died_prints_the_server_log() {
    let stderr = failing_child_stderr("failing_child_whose_server_died", "dead");
    assert!(
        stderr.contains("===== redis-server log"),
        "the log of a server that stopped answering is printed:\n{stderr}"
    );
}
