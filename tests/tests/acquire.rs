//! A plain lock's acquire without Lua (issue 39): one `MULTI`/`EXEC` of the server's own
//! commands where acquire-with-retry.lua ran, with every promise of the script's:
//! fencing tokens rising across a counter's expiry and restart, one kind per name,
//! the holder's remaining lease on a refusal, and a grant whose reply was lost released
//! in the background. Each against a real server, on every server of the matrix.

use std::time::{Duration, Instant};

use lockscript::{LockError, Locks, RetryPolicy};
use lockscript_test::command_calls;
use lockscript_test::proxy::Proxy;
use lockscript_test::server::RedisServer;

/// A liveness bound for waits that must end; never a speed assertion.
const PATIENCE: Duration = Duration::from_secs(10);

async fn locks(server: &RedisServer) -> Locks {
    Locks::connect(&server.client()).await.expect("connect")
}

/// Polls `done` until it holds, at most `bound`; panics naming `what` after that.
async fn within(bound: Duration, what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < bound, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

fn exists(server: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query(&mut server.connection())
        .unwrap()
}

fn counter(server: &RedisServer, name: &str) -> Option<u64> {
    redis::cmd("GET")
        .arg(format!("lock:{{{name}}}:fence"))
        .query(&mut server.connection())
        .unwrap()
}

/// The server's clock in microseconds.
fn server_us(server: &RedisServer) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut server.connection()).unwrap();
    s * 1_000_000 + us
}

/// The attempt is a transaction, not a script: the server runs `EXEC` once and no
/// script at all for a free lock's grant (the release is the server's business: native
/// where it offers it, compare-del.lua elsewhere). The grant's token is the counter's.
#[tokio::test]
async fn a_plain_grant_runs_one_transaction_and_no_script() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    // The connection's first attempt asks the server's clock first, and the name's
    // first grant starts its counter (raised to the server's clock if the transaction
    // reached it more than a millisecond later than expected): out of the count.
    let first = locks.try_lock("orders").await.unwrap().expect("free");
    first.release().await.unwrap();
    let mut stats = server.connection();
    lockscript_test::reset_stats(&mut stats);
    let guard = locks.try_lock("orders").await.unwrap().expect("free");
    assert_eq!(command_calls(&mut stats, "exec"), 1);
    assert_eq!(
        command_calls(&mut stats, "evalsha") + command_calls(&mut stats, "eval"),
        0,
        "no script for the grant"
    );
    assert_eq!(Some(guard.fencing_token()), counter(&server, "orders"));
    // Refused while held: one transaction again, no grant, the counter skips a number.
    assert!(locks.try_lock("orders").await.unwrap().is_none());
    assert_eq!(command_calls(&mut stats, "exec"), 2);
    let first = guard.fencing_token();
    guard.release().await.unwrap();
    let next = locks.try_lock("orders").await.unwrap().expect("free");
    assert!(next.fencing_token() > first);
    next.release().await.unwrap();
}

/// Tokens rise across a counter's expiry: each name's counter lives its lease plus the
/// retention (1 ms here) after its last attempt, and a restarted one starts at the
/// server's clock, above every token the old one gave.
#[tokio::test]
async fn tokens_rise_across_a_counters_expiry() {
    let server = RedisServer::start();
    let locks = locks(&server)
        .await
        .ttl(Duration::from_millis(100))
        .fence_retention(Duration::from_millis(1));
    let mut last = 0;
    for round in 0..3 {
        let before = server_us(&server);
        let guard = locks.try_lock("idle").await.unwrap().expect("free");
        let token = guard.fencing_token();
        assert!(token > last, "round {round}: {token} after {last}");
        assert!(
            token > before,
            "round {round}: a restarted counter starts at the server's clock"
        );
        last = token;
        guard.release().await.unwrap();
        within(PATIENCE, "the counter's expiry", || {
            counter(&server, "idle").is_none()
        })
        .await;
    }
}

/// A process whose view of the server's clock is behind it (here the server's clock
/// jumped an hour ahead after the handle learnt it) restarts a counter below the
/// server's clock; the grant is not handed out before the counter is raised to the
/// server's clock, and its token is the raised counter.
#[cfg(feature = "chaos")]
#[tokio::test]
async fn a_counter_restarted_behind_the_servers_clock_is_raised_to_it() {
    use lockscript_test::chaos::clock::ServerClock;
    let dir = tempfile::tempdir().unwrap();
    let mut clock = ServerClock::new(dir.path().join("clock"));
    let server = clock.apply(RedisServer::builder()).start();
    let locks = locks(&server).await;
    let first = locks.try_lock("a").await.unwrap().expect("free");
    let first_token = first.fencing_token();
    first.release().await.unwrap();
    clock.set(3_600_000);
    let before = server_us(&server);
    let guard = locks.try_lock("b").await.unwrap().expect("free");
    assert!(
        guard.fencing_token() > before,
        "raised to the server's clock: {} <= {before}",
        guard.fencing_token()
    );
    assert_eq!(Some(guard.fencing_token()), counter(&server, "b"));
    assert!(guard.fencing_token() > first_token);
    guard.release().await.unwrap();
    // The connection learnt the server's clock from that reply: the next restart
    // starts there by itself.
    let before = server_us(&server);
    let next = locks.try_lock("c").await.unwrap().expect("free");
    assert!(next.fencing_token() > before);
    assert!(
        next.fencing_token() < before + 60_000_000,
        "not an hour ahead"
    );
    next.release().await.unwrap();
}

/// The variable that hands the stepped-clock process its server.
#[cfg(feature = "chaos")]
const STEPPED_VAR: &str = "LOCKSCRIPT_STEPPED_CLOCK_URL";

/// The process of the test below, on a wall clock the parent steps: learns the server's
/// clock (a grant of `warm`), waits for the step, then restarts the counter of `fresh`.
/// Prints how far its wall clock is ahead of the server's after the step, and the
/// fencing token.
#[cfg(feature = "chaos")]
#[tokio::test]
#[ignore = "run by a_client_wall_clock_stepped_forward_restarts_no_counter_ahead"]
async fn stepped_clock_process() {
    use std::io::BufRead as _;
    let Ok(url) = std::env::var(STEPPED_VAR) else {
        return;
    };
    let client = redis::Client::open(url).unwrap();
    let locks = Locks::connect(&client).await.unwrap();
    locks
        .try_lock("warm")
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
    println!("READY");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let ahead_ms = i64::try_from(wall.as_millis()).unwrap() - (s * 1_000 + us / 1_000);
    println!("AHEAD {ahead_ms}");
    let guard = locks.try_lock("fresh").await.unwrap().expect("free");
    println!("FENCE {}", guard.fencing_token());
    guard.release().await.unwrap();
}

/// A client's wall clock stepped forward after its connection learnt the server's clock
/// (NTP correcting a clock that started behind): a counter the connection then restarts
/// starts at the server's clock (1 ms ahead at most), not at the step's. The estimate is
/// kept on the monotonic clock. Before (the wall clock): the counter started an hour
/// ahead, and tokens fell when it expired and restarted from the server's clock.
#[cfg(feature = "chaos")]
#[test]
fn a_client_wall_clock_stepped_forward_restarts_no_counter_ahead() {
    use std::io::{BufRead as _, BufReader, Write as _};
    use std::process::Stdio;

    use lockscript_test::chaos::clock::{self, ServerClock};
    if !clock::available() {
        eprintln!("libfaketime not installed (`apt-get install -y faketime`): skipped");
        return;
    }
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut clock = ServerClock::new(dir.path().join("clock"));
    let mut command = lockscript_test::ignored_test_process("stepped_clock_process");
    clock.apply_to_process(&mut command);
    let mut child = command
        .env(STEPPED_VAR, server.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = |prefix: &str| -> String {
        loop {
            let line = lines.next().expect("the process's output").unwrap();
            // libtest's own "test … ... " may open the first line.
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_owned();
            }
        }
    };
    next("READY");
    clock.set(3_600_000);
    writeln!(child.stdin.take().unwrap(), "STEPPED").unwrap();
    let ahead_ms: i64 = next("AHEAD").parse().unwrap();
    let fence: u64 = next("FENCE").parse().unwrap();
    let after = server_us(&server);
    assert!(child.wait().unwrap().success());
    assert!(
        (3_590_000..3_610_000).contains(&ahead_ms),
        "the process's wall clock moved an hour: {ahead_ms} ms ahead of the server's"
    );
    assert_eq!(Some(fence), counter(&server, "fresh"));
    assert!(
        fence <= after + 1_001,
        "the counter started {} s ahead of the server's clock",
        (fence - after) / 1_000_000
    );
}

/// One name, one kind, both ways. Readers hold the name: a lock is refused with
/// `WrongKind`, and the key its transaction wrote is released in the background at
/// once (the readers keep their grant). A lock holds it: readers and permits are
/// refused.
#[tokio::test]
async fn a_lock_and_readers_or_permits_never_share_a_name() {
    let server = RedisServer::start();
    let locks = locks(&server).await;
    let reader = locks.rw().read("mixed").await.unwrap();
    let err = locks.try_lock("mixed").await.unwrap_err();
    assert!(
        matches!(&err, LockError::WrongKind { name, .. } if name == "mixed"),
        "{err:?}"
    );
    let took = within(PATIENCE, "the undone grant's release", || {
        !exists(&server, "lock:{mixed}")
    })
    .await;
    assert!(took < Duration::from_secs(1), "released at once: {took:?}");
    assert!(reader.is_held().await.unwrap());
    reader.release().await.unwrap();

    let guard = locks.try_lock("mixed").await.unwrap().expect("free again");
    assert!(
        !matches!(locks.rw().try_read("mixed").await, Ok(Some(_))),
        "no reader beside a lock"
    );
    assert!(
        !matches!(locks.semaphore(2).try_acquire("mixed").await, Ok(Some(_))),
        "no permit beside a lock"
    );
    guard.release().await.unwrap();
}

/// A refusal carries the holder's remaining lease (`PTTL`): a waiter whose holder
/// vanished without releasing (no notification comes) and whose backoff is 30 s sleeps
/// only until that lease ends, and is granted then: refused, refused again once
/// subscribed, granted. Without the lease in the refusal it would sleep its backoff
/// past its 10 s wait.
#[tokio::test]
async fn a_refusal_tells_the_waiter_the_holders_remaining_lease() {
    let server = RedisServer::start();
    let vanished = locks(&server)
        .await
        .ttl(Duration::from_millis(800))
        .watchdog(false);
    let holder = vanished.try_lock("q").await.unwrap().expect("free");
    let expires = Instant::now() + Duration::from_millis(800);
    std::mem::forget(holder);
    let waiter = locks(&server)
        .await
        .wait_timeout(PATIENCE)
        .retry(RetryPolicy::new(
            Duration::from_secs(30),
            Duration::from_secs(30),
        ));
    let guard = waiter.lock("q").await.unwrap();
    assert_eq!(
        guard.attempts(),
        3,
        "refused twice, then granted at the expiry"
    );
    assert!(
        Instant::now() + Duration::from_millis(50) >= expires,
        "not before the lease ended"
    );
    guard.release().await.unwrap();
}

/// The transaction ran but its reply was lost (the connection cut after the request
/// went): the grant is nobody's, and the face releases it in the background with its
/// own token, so the lock is free again well before its 60 s lease would end.
#[tokio::test]
async fn a_grant_whose_reply_was_lost_is_released_in_the_background() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let locks = Locks::connect(&redis::Client::open(proxy.url()).unwrap())
        .await
        .unwrap()
        .ttl(Duration::from_secs(60));
    locks
        .try_lock("warm")
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    proxy.reset_after(b"MULTI");
    let err = locks.try_lock("lost").await.unwrap_err();
    assert!(matches!(err, LockError::Redis(_)), "{err:?}");
    let ran = counter(&server, "lost").expect("the transaction ran");
    within(PATIENCE, "the lost grant's release", || {
        !exists(&server, "lock:{lost}")
    })
    .await;
    let guard = locks.try_lock("lost").await.unwrap().expect("free again");
    assert!(guard.fencing_token() > ran);
    guard.release().await.unwrap();
}

/// The blocking face sends the same transaction, with the same outcome.
#[test]
fn the_blocking_face_acquires_with_the_same_transaction() {
    let server = RedisServer::start();
    // 10 s leases: no renewal (a script on a server without SET IFEQ) during the count.
    let counted = lockscript::blocking::Locks::connect(&server.client())
        .unwrap()
        .ttl(Duration::from_secs(10));
    // The clock question and the name's first counter out of the count.
    counted.try_lock("c").unwrap().unwrap().release().unwrap();
    let mut stats = server.connection();
    lockscript_test::reset_stats(&mut stats);
    let guard = counted.try_lock("c").unwrap().expect("free");
    assert_eq!(command_calls(&mut stats, "exec"), 1);
    assert_eq!(command_calls(&mut stats, "evalsha"), 0);
    assert!(counted.try_lock("c").unwrap().is_none(), "held");
    guard.release().unwrap();
    // Tokens across a counter's expiry (100 ms leases, 1 ms retention).
    let locks = lockscript::blocking::Locks::connect(&server.client())
        .unwrap()
        .fence_retention(Duration::from_millis(1))
        .ttl(Duration::from_millis(100));
    let guard = locks.try_lock("b").unwrap().expect("free");
    assert!(locks.try_lock("b").unwrap().is_none(), "held");
    let first = guard.fencing_token();
    guard.release().unwrap();
    let started = Instant::now();
    while counter(&server, "b").is_some() {
        assert!(started.elapsed() < PATIENCE, "the counter's expiry");
        std::thread::sleep(Duration::from_millis(5));
    }
    let next = locks.try_lock("b").unwrap().expect("free");
    assert!(next.fencing_token() > first);
    next.release().unwrap();
}
