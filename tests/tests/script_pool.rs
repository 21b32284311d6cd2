//! The pool of `TestRedis` servers, alone in its test binary so that no other test takes
//! a server from the pool in between.

use lockscript_test::TestRedis;
use lockscript_test::fixtures::bump;
use redis::Commands;

#[test]
fn a_pooled_server_is_reused_empty_with_its_scripts_and_zeroed_counters() {
    // Two at once, as two tests running in parallel take them.
    let first = TestRedis::start();
    let second = TestRedis::start();
    let ports = [port(&first), port(&second)];
    for redis in [&first, &second] {
        redis.exec("SET leftover 1\nFUNCTION LOAD \"#!lua name=lib\\nredis.register_function('f', function() return 1 end)\"");
        let _: i64 = bump("c", 1).invoke(&mut redis.connection()).unwrap();
    }
    drop((first, second));
    let again = [TestRedis::start(), TestRedis::start()];
    for redis in &again {
        assert!(ports.contains(&port(redis)), "a new server was started");
        let mut conn = redis.connection();
        let keys: Vec<String> = conn.keys("*").unwrap();
        assert!(keys.is_empty(), "{keys:?}");
        let functions: Vec<redis::Value> =
            redis::cmd("FUNCTION").arg("LIST").query(&mut conn).unwrap();
        assert!(functions.is_empty(), "{functions:?}");
        assert_eq!(redis.command_calls("evalsha"), 0);
    }
}

fn port(redis: &TestRedis) -> u16 {
    redis.server().expect("a private server").port()
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
