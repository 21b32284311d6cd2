//! Faults injected for real: a paused holder process, a paused server, a server killed
//! with and without persistence, a flushed script cache, an unreachable server.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lockscript::builtin::fenced_set;
use lockscript::{LockError, Locks};
use lockscript_test::proxy::Proxy;
use lockscript_test::server::RedisServer;
use redis::AsyncCommands;

const PATIENCE: Duration = Duration::from_secs(10);

/// How late `lost()` may fire after the validity end (the guide's figure; `loss.rs`
/// measures it for every handle and fault).
const LOSS_SLACK: Duration = Duration::from_millis(100);

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {PATIENCE:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_script_cache_does_not_break_extend_or_release() {
    let server = RedisServer::start();
    let locks = Locks::connect(&server.client()).await.unwrap();
    let guard = locks.lock("q").await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    guard.extend(Duration::from_secs(60)).await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    guard.release().await.unwrap();
    assert!(locks.try_lock("q").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_a_typed_error_that_says_what_to_do() {
    let mut server = RedisServer::start();
    let client = server.client();
    let locks = Locks::connect(&client)
        .await
        .unwrap()
        .wait_timeout(Duration::from_secs(2));
    server.stop();
    let started = Instant::now();
    let err = locks.lock("q").await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded by wait_timeout"
    );
    assert!(matches!(err, LockError::Redis(_)), "{err:?}");
    assert!(
        err.to_string().contains("check that the server is up")
            || err.to_string().contains("no server is listening"),
        "{err}"
    );

    // Connecting to a closed port fails at once, naming the address, with the same advice.
    let err = Locks::connect(&client).await.unwrap_err();
    assert!(matches!(err, LockError::Connect { .. }), "{err:?}");
    assert!(err.to_string().contains("no server is listening"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_appendfsync_always_locks_and_fences_survive_a_restart() {
    let mut server = RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .arg("--appendfsync")
        .arg("always")
        .start();
    let locks = Locks::connect(&server.client())
        .await
        .unwrap()
        .ttl(Duration::from_secs(30));
    let guard = locks.lock("q").await.unwrap();
    let f0 = guard.fencing_token();
    server.stop(); // SIGKILL: nothing beyond what fsync already wrote
    server.restart();
    let mut conn = server.multiplexed().await;
    let pttl: i64 = conn.pttl("lock:{q}").await.unwrap();
    assert!(pttl > 0, "the lease survived: pttl {pttl}");
    // The managed connection reconnects; the guard still owns the lock.
    let mut held = false;
    for _ in 0..50 {
        match guard.is_held().await {
            Ok(h) => {
                held = h;
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert!(held, "the guard still holds the lock after the restart");
    guard.release().await.unwrap();
    let next = locks.lock("q").await.unwrap();
    assert_eq!(
        next.fencing_token(),
        f0 + 1,
        "the fencing counter survived too"
    );
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence_is_reported_as_a_loss() {
    let mut server = RedisServer::start();
    let locks = Locks::connect(&server.client())
        .await
        .unwrap()
        .ttl(Duration::from_millis(600));
    let guard = locks.lock("q").await.unwrap();
    server.stop();
    server.restart(); // empty: the key is gone
    within("the loss signal", guard.lost()).await;
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotHeld { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_times_out_calls_and_grants_no_second_holder_early() {
    let server = RedisServer::start();
    let holder_locks = Locks::connect(&server.client())
        .await
        .unwrap()
        .ttl(Duration::from_millis(600));
    let other = Locks::connect(&server.client())
        .await
        .unwrap()
        .ttl(Duration::from_secs(3))
        .wait_timeout(Duration::from_secs(8));
    let holder = holder_locks.lock("q").await.unwrap();

    server.signal("STOP");
    let paused = Instant::now();
    // A call to a paused server ends with a typed timeout, bounded by the connection's
    // response timeout, instead of hanging.
    let err = other.try_lock("q").await.unwrap_err();
    assert!(
        matches!(&err, LockError::Redis(e) if e.is_timeout()),
        "{err:?}"
    );
    assert!(
        paused.elapsed() < Duration::from_secs(3),
        "bounded: {:?}",
        paused.elapsed()
    );
    // The holder cannot renew: its loss is signalled at its validity end, which comes
    // before the server could expire the key (ttl counted from when it received the
    // command) and so before anyone else can hold the lock.
    within("the holder's loss signal", holder.lost()).await;
    let lost_at = Instant::now();
    let valid_until = holder.valid_until();
    assert!(
        lost_at >= valid_until && lost_at - valid_until <= LOSS_SLACK,
        "lost() fired {:?} after the validity end",
        lost_at.saturating_duration_since(valid_until)
    );
    std::thread::sleep(Duration::from_millis(300));
    server.signal("CONT");

    let next = within("the next grant", other.lock("q")).await.unwrap();
    // The timed-out attempt may have run once the server resumed (its grant, whose
    // reply was lost, is released in the background): the token is then 3, not 2.
    assert!(next.fencing_token() > holder.fencing_token());
    assert!(matches!(
        holder.release().await,
        Err(LockError::NotHeld { .. })
    ));
    next.release().await.unwrap();
}

/// A grant whose reply was lost is released in the background; when that release is
/// retried (its own reply was lost too), the retry must not delete the grant the waiter
/// got meanwhile. Every attempt has its own owner token, so it cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_release_of_a_lost_grant_never_deletes_the_next_grant() {
    let server = RedisServer::start();
    // Cached, so the scripts go as EVALSHA and the proxy can tell them by their digest
    // (compare-del.lua, the release where the server has no DELIFEQ or DELEX).
    lockscript_test::load_scripts(&mut server.connection());
    let proxy = Proxy::start(server.port());
    let client = redis::Client::open(proxy.url()).unwrap();
    let locks = Locks::connect(&client)
        .await
        .unwrap()
        .ttl(Duration::from_secs(1))
        .wait_timeout(Duration::from_secs(5));
    // The first acquire runs but its reply is cut; the background release of that grant
    // runs too, but its reply is cut as well, so it is retried 50 ms later, while the
    // waiter's next attempt has already been granted.
    let compare_del = lockscript::builtin::compare_del("k", "t").script().sha1();
    let first = locks.try_lock("reuse").await.unwrap().expect("free");
    let f0 = first.fencing_token();
    first.release().await.unwrap();
    // The acquire transaction; the release the server runs (one of the three, each
    // trigger fires once at most).
    proxy.reset_after(b"MULTI");
    for release in [compare_del.as_bytes(), b"DELIFEQ", b"DELEX"] {
        proxy.reset_after(release);
    }
    let guard = within("the grant after the lost one", locks.lock("reuse"))
        .await
        .unwrap();
    assert!(guard.fencing_token() >= f0 + 2, "the lost grant counted");
    // Past the background release's retries (50, 100, 200 ms): the lock must still be
    // this guard's.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(guard.is_held().await.unwrap(), "the key is still ours");
    let other = Locks::connect(&server.client()).await.unwrap();
    assert!(
        other.try_lock("reuse").await.unwrap().is_none(),
        "nobody else can take it"
    );
    guard.release().await.unwrap();
}

/// The pub/sub server accepts the connection and never answers: `lock()` still ends
/// within `wait_timeout` plus the response timeout (waiters never wait on the
/// notification connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_returns_within_its_bound_when_the_notification_server_stops_answering() {
    let server = RedisServer::start();
    let silent = Proxy::start(server.port());
    silent.set_blackhole(true);
    let holder = Locks::connect(&server.client()).await.unwrap();
    let _held = holder.lock("silent").await.unwrap();
    let conn = server.multiplexed().await;
    let wait = Duration::from_secs(1);
    let locks = Locks::new(conn)
        .notifications(redis::Client::open(silent.url()).unwrap())
        .wait_timeout(wait);
    let started = Instant::now();
    let err = locks.lock("silent").await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    assert!(took >= wait, "waited the whole wait_timeout: {took:?}");
    assert!(
        took <= wait + lockscript::DEFAULT_RESPONSE_TIMEOUT,
        "bounded by wait_timeout plus the response timeout: {took:?}"
    );
}

const HOLDER_VAR: &str = "LOCKSCRIPT_PAUSED_HOLDER_URL";

/// The holder process: acquires, says so, is SIGSTOPped by the parent for longer than
/// its lease, then reports what it sees after it resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by a_paused_holder_process_is_refused_after_it_resumes"]
async fn paused_holder_process() {
    let Ok(url) = std::env::var(HOLDER_VAR) else {
        return;
    };
    let client = redis::Client::open(url).unwrap();
    let locks = Locks::connect(&client)
        .await
        .unwrap()
        .ttl(Duration::from_millis(400));
    let guard = locks.lock("report").await.unwrap();
    println!("HOLD {}", guard.fencing_token());
    // The parent stops this process during this sleep, past the lease.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .is_ok();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let written = fenced_set(
        "report:data",
        "report:data:fence-seen",
        guard.fencing_token(),
        "stale",
    )
    .invoke_async(&mut conn)
    .await
    .unwrap();
    let extend = matches!(
        guard.extend(Duration::from_secs(1)).await,
        Err(LockError::NotHeld { .. })
    );
    let release = matches!(guard.release().await, Err(LockError::NotHeld { .. }));
    println!(
        "RESULT lost={lost} written={written} extend_refused={extend} release_refused={release}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_process_is_refused_after_it_resumes() {
    let server = RedisServer::start();
    let mut child = lockscript_test::ignored_test_process("paused_holder_process")
        .env(HOLDER_VAR, server.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let hold = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| {
            l.split_once("HOLD ")
                .map(|(_, f)| f.trim().parse::<u64>().unwrap())
        })
        .expect("the holder acquired");

    // Freeze the holder past its 400 ms lease, and take the lock meanwhile.
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let locks = Locks::connect(&server.client()).await.unwrap();
    let guard = within("the takeover", locks.lock("report")).await.unwrap();
    assert!(guard.fencing_token() > hold);
    let mut conn = server.multiplexed().await;
    let written = fenced_set(
        "report:data",
        "report:data:fence-seen",
        guard.fencing_token(),
        "fresh",
    )
    .invoke_async(&mut conn)
    .await
    .unwrap();
    assert_eq!(written, 1);
    assert!(
        Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success()
    );

    // Read to the end: closing the pipe early would fail the holder's own output.
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let result = rest
        .iter()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.trim().to_owned()));
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let result = result.unwrap_or_else(|| panic!("no result from the holder: {stderr}"));
    assert_eq!(
        result, "lost=true written=0 extend_refused=true release_refused=true",
        "what the resumed holder saw"
    );
    let data: String = conn.get("report:data").await.unwrap();
    assert_eq!(data, "fresh", "the stale holder's write was refused");
    guard.release().await.unwrap();
    assert!(out.status.success(), "the holder process failed: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_reply_comes_after_its_validity_is_released() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = redis::Client::open(proxy.url()).unwrap();
    let locks = Locks::connect(&client)
        .await
        .unwrap()
        .ttl(Duration::from_millis(100));
    // The connection learns the server's clock first (one round trip, once).
    drop(locks.try_lock("warm").await.unwrap());
    proxy.set_delay(Duration::from_millis(150));
    assert!(
        locks.try_lock("slow").await.unwrap().is_none(),
        "a grant that arrived after its 100 ms lease is no grant"
    );
    proxy.set_delay(Duration::ZERO);
    let mut direct = server.multiplexed().await;
    within("the late grant to be gone", async {
        while direct.exists::<_, bool>("lock:{slow}").await.unwrap() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // With replies on time again, the lock works, and the token shows the late grant
    // was counted (and released), never handed out.
    let counted: Option<u64> = direct.get("lock:{slow}:fence").await.unwrap();
    let counted = counted.expect("the late grant ran: the counter exists");
    let guard = locks.try_lock("slow").await.unwrap().expect("free");
    assert!(guard.fencing_token() > counted);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_connections_are_an_error_and_the_next_call_recovers() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = redis::Client::open(proxy.url()).unwrap();
    let locks = Locks::connect(&client).await.unwrap();
    let guard = locks.lock("reset").await.unwrap();
    proxy.reset();
    // The connection was cut: a call may fail with an I/O error (never blindly
    // re-sent), and the managed connection comes back by itself.
    let mut held = None;
    for _ in 0..100 {
        match guard.is_held().await {
            Ok(h) => {
                held = Some(h);
                break;
            }
            Err(LockError::Redis(e)) => {
                assert!(
                    e.is_io_error() || e.is_connection_dropped() || e.is_timeout(),
                    "{e}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(held, Some(true), "the lock survived the reset");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_pause_write_ends_calls_with_a_timeout_then_recovers() {
    let server = RedisServer::start();
    let locks = Locks::connect(&server.client())
        .await
        .unwrap()
        .ttl(Duration::from_secs(2));
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_500)
        .arg("WRITE")
        .query(&mut server.connection())
        .unwrap();
    let started = Instant::now();
    let err = locks.try_lock("paused").await.unwrap_err();
    assert!(
        matches!(&err, LockError::Redis(e) if e.is_timeout()),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "bounded by the response timeout"
    );
    // Once writes resume, the attempt that timed out may run; it is released in the
    // background, and the lock is free again well within its ttl.
    let guard = within("a grant after the pause", async {
        loop {
            if let Ok(Some(guard)) = locks.try_lock("paused").await {
                break guard;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(2) + Duration::from_millis(500) * 2);
    guard.release().await.unwrap();
}

/// Sends each command on the next of several connections, as a connection that is
/// re-made between any two commands would.
#[derive(Clone)]
struct EveryCommandOnAFreshConnection {
    conns: std::sync::Arc<Vec<redis::aio::MultiplexedConnection>>,
    next: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl EveryCommandOnAFreshConnection {
    fn pick(&self) -> redis::aio::MultiplexedConnection {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.conns[i % self.conns.len()].clone()
    }
}

impl redis::aio::ConnectionLike for EveryCommandOnAFreshConnection {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        let mut conn = self.pick();
        Box::pin(async move { conn.req_packed_command(cmd).await })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        let mut conn = self.pick();
        Box::pin(async move { conn.req_packed_commands(cmd, offset, count).await })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// `WAIT` counts the replicas that acknowledged the writes of *its* connection; on a
/// connection made after the grant (a reconnect) a bare `WAIT` counts every replica and
/// answers at once. The grant must still be refused when its only replica never got it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_counts_only_replicas_that_have_the_grant_even_after_a_reconnect() {
    let (primary, replica) = RedisServer::with_replica();
    // More connections than commands below: each command goes on one that never
    // wrote anything, as after a reconnect.
    let mut conns = Vec::new();
    for _ in 0..12 {
        conns.push(primary.multiplexed().await);
    }
    let conn = EveryCommandOnAFreshConnection {
        conns: std::sync::Arc::new(conns),
        next: std::sync::Arc::default(),
    };
    let locks = Locks::new(conn).wait_for_replicas(1, Duration::from_millis(200));
    let guard = locks.try_lock("replicated").await.unwrap().expect("free");
    guard.release().await.unwrap();

    // The replica stops acknowledging anything.
    replica.signal("STOP");
    let err = locks.try_lock("replicated").await.unwrap_err();
    replica.signal("CONT");
    assert!(
        matches!(
            err,
            LockError::NotReplicated {
                acked: 0,
                wanted: 1,
                ..
            }
        ),
        "{err:?}"
    );
}

/// Review defect 4. With `wait_for_replicas`, the confirmation (renew.lua and `WAIT`)
/// answers after the grant's validity end: the call must not return a guard already
/// lost, and it must stay within the response timeout plus the `WAIT` timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_confirmed_by_replicas_after_its_validity_is_no_grant() {
    let (primary, _replica) = RedisServer::with_replica();
    let proxy = Proxy::start(primary.port());
    // A WAIT timeout of a whole second: a replica on a loaded machine may take a while.
    let (ttl, wait) = (Duration::from_secs(1), Duration::from_secs(1));
    let locks = Locks::connect(&redis::Client::open(proxy.url()).unwrap())
        .await
        .unwrap()
        .ttl(ttl)
        .wait_for_replicas(1, wait);
    let warm = locks.try_lock("warm").await.unwrap().expect("replicated");
    warm.release().await.unwrap();
    // The confirmation's reply comes 1.1 s late: after the 1 s lease.
    proxy.delay_reply_to(b"WAIT", Duration::from_millis(1_100));
    let started = Instant::now();
    let result = locks.try_lock("late").await;
    let took = started.elapsed();
    if let Ok(Some(guard)) = &result {
        assert!(
            !guard.is_lost(),
            "a guard already lost was returned ({took:?} after the call began)"
        );
    }
    assert!(
        took <= lockscript::DEFAULT_RESPONSE_TIMEOUT + wait + Duration::from_millis(250),
        "the call took {took:?}: {result:?}"
    );
}
