//! Redlock over independent masters started by the harness: every failure mask, a
//! stalled master, fencing tokens across changing majorities, the loss signal, and
//! several processes contending.

use std::time::{Duration, Instant};

use lockscript::{LockError, Redlock};
use lockscript_test::contenders;
use lockscript_test::proxy::Proxy;
use lockscript_test::server::RedisServer;
use redis::Commands;

const NODE_TIMEOUT: Duration = Duration::from_millis(50);
const PATIENCE: Duration = Duration::from_secs(10);

fn masters(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

async fn redlock(servers: &[RedisServer]) -> Redlock {
    let clients: Vec<redis::Client> = servers.iter().map(RedisServer::client).collect();
    Redlock::connect(&clients)
        .await
        .unwrap()
        .node_timeout(NODE_TIMEOUT)
        .ttl(Duration::from_secs(5))
}

fn holders(servers: &[RedisServer], key: &str) -> usize {
    servers
        .iter()
        .filter(|s| s.is_running())
        .filter(|s| {
            let mut conn = s.connection();
            conn.exists::<_, bool>(key).unwrap()
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_grants_and_fencing_tokens_rise() {
    let servers = masters(5);
    let redlock = redlock(&servers).await;
    assert_eq!(redlock.quorum(), 3);
    let first = redlock.lock("orders").await.unwrap();
    let f0 = first.fencing_token();
    assert_eq!(holders(&servers, "lock:{orders}"), 5);
    assert!(redlock.try_lock("orders").await.unwrap().is_none());
    assert_eq!(
        holders(&servers, "lock:{orders}"),
        5,
        "a refused attempt leaves the holder's keys"
    );
    first.release().await.unwrap();
    assert_eq!(holders(&servers, "lock:{orders}"), 0);
    let second = redlock.lock("orders").await.unwrap();
    assert!(second.fencing_token() > f0);
    second.release().await.unwrap();
}

/// Every subset of dead masters: up to 2 of 5 grants, 3 or more refuses within the
/// wait budget and leaves no key behind on the live ones (redsync tests every mask).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failure_mask_of_five_masters() {
    let mut servers = masters(5);
    let wait = Duration::from_millis(300);
    for mask in 0u32..32 {
        let dead: Vec<usize> = (0..5).filter(|i| mask & (1 << i) != 0).collect();
        for &i in &dead {
            servers[i].stop();
        }
        // A fresh handle: no connection state carried over from the last mask.
        let redlock = redlock(&servers).await.wait_timeout(wait);
        let started = Instant::now();
        let outcome = redlock.lock("masked").await;
        let took = started.elapsed();
        if dead.len() <= 2 {
            let guard = outcome.unwrap_or_else(|e| panic!("mask {dead:?} should grant: {e}"));
            guard.release().await.unwrap();
        } else {
            // Too few masters answer: the error says so (not a timeout, as if the lock
            // were merely held).
            match &outcome {
                Err(e @ LockError::Redis(_)) => assert!(
                    e.to_string().contains("Redlock masters answered"),
                    "mask {dead:?}: {e}"
                ),
                other => panic!("mask {dead:?} should refuse: {other:?}"),
            }
            assert!(
                took < wait + Duration::from_secs(1),
                "mask {dead:?} took {took:?}"
            );
            assert_eq!(
                holders(&servers, "lock:{masked}"),
                0,
                "mask {dead:?} left a key"
            );
        }
        for &i in &dead {
            servers[i].restart();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_master_costs_at_most_its_node_timeout() {
    let servers = masters(5);
    let redlock = redlock(&servers).await;
    // Warm the connections, then freeze one master (the kernel still accepts its TCP).
    redlock.lock("warm").await.unwrap().release().await.unwrap();
    servers[2].signal("STOP");
    let started = Instant::now();
    let guard = redlock.try_lock("stalled").await.unwrap();
    let took = started.elapsed();
    servers[2].signal("CONT");
    let guard = guard.expect("4 of 5 masters grant");
    assert!(
        took < NODE_TIMEOUT * 8,
        "one stalled master stalled the attempt for {took:?}"
    );
    guard.release().await.unwrap();
}

/// Makes a master refuse scripts (an ACL change), so it misses rounds without losing
/// its counters: the majorities change and the per-master counters drift apart.
fn refuse_scripts(server: &RedisServer, refuse: bool) {
    let rule = if refuse { "-@scripting" } else { "+@all" };
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg(rule)
        .query(&mut server.connection())
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_rise_across_changing_majorities() {
    let servers = masters(5);
    let redlock = redlock(&servers).await;
    let mut last = 0;
    let mut counters_diverged = false;
    for round in 0u64..15 {
        // A different pair of masters sits each round out.
        let out = [(round % 5) as usize, ((round * 3 + 1) % 5) as usize];
        for &i in &out {
            refuse_scripts(&servers[i], true);
        }
        let guard = redlock.lock("fenced").await;
        for &i in &out {
            refuse_scripts(&servers[i], false);
        }
        let guard = guard.unwrap();
        assert!(
            guard.fencing_token() > last,
            "round {round}: token {} after {last}",
            guard.fencing_token()
        );
        last = guard.fencing_token();
        guard.release().await.unwrap();
        let counters: Vec<i64> = servers
            .iter()
            .map(|s| {
                s.connection()
                    .get::<_, Option<i64>>("lock:{fenced}:fence")
                    .unwrap()
                    .unwrap_or(0)
            })
            .collect();
        counters_diverged |= counters.iter().any(|c| *c != counters[0]);
    }
    assert!(
        counters_diverged,
        "the test must make the masters' counters differ"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_on_a_majority_and_signals_the_loss_of_it() {
    let servers = masters(3);
    let redlock = redlock(&servers).await.ttl(Duration::from_millis(300));
    let guard = redlock.lock("kept").await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!guard.is_lost(), "renewed across three ttls");
    assert_eq!(holders(&servers, "lock:{kept}"), 3);
    assert!(guard.is_held().await.unwrap());
    guard.extend(Duration::from_secs(2)).await.unwrap();

    // An operator deletes the key on two of three masters: renewals miss the majority.
    for s in &servers[..2] {
        let _: () = s.connection().del("lock:{kept}").unwrap();
    }
    tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("the loss is signalled");
    assert!(matches!(
        guard.extend(Duration::from_secs(1)).await,
        Err(LockError::NotHeld { .. })
    ));
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotHeld { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_refused_before_anything_is_sent() {
    let servers = masters(3);
    for timeout in [Duration::from_secs(4), Duration::MAX, Duration::ZERO] {
        let bad = redlock(&servers).await.node_timeout(timeout);
        assert!(
            matches!(bad.try_lock("x").await, Err(LockError::InvalidSettings(_))),
            "node_timeout {timeout:?}"
        );
    }
    let none: Redlock<redis::aio::MultiplexedConnection> = Redlock::new(Vec::new());
    assert!(matches!(
        none.lock("x").await,
        Err(LockError::InvalidSettings(_))
    ));
    assert_eq!(holders(&servers, "lock:{x}"), 0);
}

/// A Redlock over `servers` through proxies, with its connections made and the scripts
/// cached; then every reply is delayed by `delay`.
async fn delayed(servers: &[RedisServer], delay: Duration, ttl: Duration) -> (Redlock, Vec<Proxy>) {
    let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.port())).collect();
    let clients: Vec<redis::Client> = proxies
        .iter()
        .map(|p| redis::Client::open(p.url()).unwrap())
        .collect();
    let redlock = Redlock::connect(&clients)
        .await
        .unwrap()
        .node_timeout(NODE_TIMEOUT)
        .ttl(ttl);
    redlock
        .try_lock("warm")
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    for proxy in &proxies {
        proxy.set_delay(delay);
    }
    (redlock, proxies)
}

/// An attempt dropped anywhere (during the acquire round, between it and the fencing
/// round, during the undo) leaves nothing behind: whatever it was granted is released in
/// the background, long before its 60 s lease would run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_cancelled_at_any_point_leaves_no_grant_behind() {
    let servers = masters(3);
    let (redlock, _proxies) =
        delayed(&servers, Duration::from_millis(15), Duration::from_secs(60)).await;
    let mut cancelled = 0;
    for round in 0..40u64 {
        // The rounds take 15 ms each; cut anywhere in the first 45 ms.
        let cutoff = Duration::from_micros(getrandom::u64().unwrap() % 45_000);
        match tokio::time::timeout(cutoff, redlock.try_lock("cut")).await {
            // Refused is possible too: on a loaded machine a master's reply can miss
            // the node timeout. What this test checks is what is left behind.
            Ok(granted) => {
                if let Some(guard) = granted.unwrap() {
                    guard.release().await.unwrap();
                }
            }
            Err(_) => cancelled += 1,
        }
        let started = Instant::now();
        while holders(&servers, "lock:{cut}") > 0 {
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "round {round} (cut at {cutoff:?}): a grant outlived its attempt by a second"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    assert!(cancelled > 10, "most attempts were cut: {cancelled}");
}

/// The Redlock validity rule: a grant's lease counts from before its first command was
/// sent, so the time the rounds took is subtracted from it (ttl − elapsed − drift).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_counts_from_before_the_first_round() {
    let servers = masters(3);
    let ttl = Duration::from_secs(2);
    let (redlock, _proxies) = delayed(&servers, Duration::from_millis(20), ttl).await;
    let redlock = redlock.watchdog(false);
    let before = Instant::now();
    let guard = redlock.try_lock("valid").await.unwrap().expect("granted");
    let after = Instant::now();
    assert!(
        after - before >= Duration::from_millis(40),
        "two rounds of 20 ms"
    );
    // 2 s - 1% - 2 ms
    let validity = Duration::from_millis(1_978);
    let end = before + validity;
    // Counted from after the rounds, it would end 40 ms later.
    assert!(
        guard.valid_until() <= end + Duration::from_millis(10),
        "the lease ends {:?} too late: the rounds' time was not subtracted",
        guard.valid_until().saturating_duration_since(end)
    );
    assert!(
        guard.valid_until() + (after - before) >= end,
        "the lease counts from the first round, not earlier"
    );
    guard.release().await.unwrap();
}

const URLS_VAR: &str = "LOCKSCRIPT_REDLOCK_URLS";

/// One contender process: prints a `GRANT fence start end` line per grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by processes_contending_through_redlock_never_overlap"]
async fn redlock_contender_process() {
    let Ok(urls) = std::env::var(URLS_VAR) else {
        return;
    };
    let clients: Vec<redis::Client> = urls
        .split(',')
        .map(|u| redis::Client::open(u).unwrap())
        .collect();
    let redlock = Redlock::connect(&clients)
        .await
        .unwrap()
        .node_timeout(NODE_TIMEOUT)
        .wait_timeout(Duration::from_secs(30));
    contenders::contend(2, 8, Duration::from_micros(300), move || {
        let redlock = redlock.clone();
        async move {
            let guard = redlock.lock("contended").await.unwrap();
            (guard.fencing_token(), async move {
                guard.release().await.unwrap();
            })
        }
    })
    .await;
}

#[test]
fn processes_contending_through_redlock_never_overlap() {
    let servers = masters(3);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut history = contenders::run("redlock_contender_process", (URLS_VAR, &urls.join(",")), 3);
    assert_eq!(history.len(), 3 * 2 * 8, "every grant was recorded");
    lockscript_test::history::assert_exclusive(&mut history);
}
