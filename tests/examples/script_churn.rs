//! Scripts that stay cached: between two lock cycles (`try_lock` + `release`) another
//! client runs 600 scripts it has not run before with `EVAL` (since Redis 7.4 an
//! EVAL-cached script sits in an LRU of 500, so an idle one is evicted). The cycles run
//! twice on the same server: as lockscript
//! delivers scripts (after `NOSCRIPT`, `SCRIPT LOAD`, which is never evicted) and with the
//! plain EVAL fallback (EVALSHA, then EVAL on `NOSCRIPT`), which re-caches a script only
//! as an evictable one. Prints the EVALSHA hit rate and the `NOSCRIPT` count of each.
//!
//! ```console
//! $ REDIS_SERVER_BIN=/path/to/redis-server-8.x cargo run --release -p lockscript-harness --example script_churn [-- CYCLES]
//! ```
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockscript::Locks;
use lockscript::builtin::{acquire, compare_del};
use lockscript_test::server::RedisServer;

/// Scripts the other client EVALs between two cycles: more than the LRU of Redis 7.4+.
const BURST: u64 = 600;

#[derive(Default)]
struct Counts {
    evalsha: u64,
    noscript: u64,
    loads: u64,
}

/// EVALSHA calls, `NOSCRIPT` errors and `SCRIPT LOAD`s the server counted since the
/// last reset (the churning client sends only EVAL, so these are the cycle's).
async fn counts(conn: &mut redis::aio::MultiplexedConnection) -> Counts {
    let stats: String = redis::cmd("INFO")
        .arg("all")
        .query_async(conn)
        .await
        .unwrap();
    let field = |prefix: &str, key: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(key))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0)
    };
    Counts {
        evalsha: field("cmdstat_evalsha:", "calls="),
        noscript: field("errorstat_NOSCRIPT:", "count="),
        loads: field("cmdstat_script|load:", "calls="),
    }
}

async fn reset(conn: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(conn)
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await
        .unwrap();
}

/// The plain fallback: EVALSHA, and EVAL with the source on `NOSCRIPT`.
async fn eval_fallback(
    conn: &mut redis::aio::MultiplexedConnection,
    script: &lockscript::Script,
    keys: &[&str],
    args: &[&str],
    evals: &AtomicU64,
) -> redis::Value {
    let mut evalsha = redis::cmd("EVALSHA");
    evalsha
        .arg(script.sha1())
        .arg(keys.len())
        .arg(keys)
        .arg(args);
    match evalsha.query_async::<redis::Value>(conn).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            evals.fetch_add(1, Ordering::Relaxed);
            let mut eval = redis::cmd("EVAL");
            eval.arg(script.source())
                .arg(keys.len())
                .arg(keys)
                .arg(args);
            eval.query_async(conn).await.unwrap()
        }
        other => other.unwrap(),
    }
}

fn report(label: &str, cycles: u64, took: Duration, c: &Counts, evals: u64) {
    #[allow(clippy::cast_precision_loss)]
    let hit = 100.0 * (1.0 - c.noscript as f64 / c.evalsha.max(1) as f64);
    println!(
        "{label:<34} {cycles:>6} cycles in {:>5.2} s  EVALSHA {:>6}  NOSCRIPT {:>5}  hit rate {hit:>6.2}%  SCRIPT LOAD {:>3}  EVAL {:>5}",
        took.as_secs_f64(),
        c.evalsha,
        c.noscript,
        c.loads,
        evals
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let cycles: u64 = std::env::args()
        .nth(1)
        .map_or(200, |a| a.parse().expect("CYCLES"));
    let server = RedisServer::start();
    let mut admin = server.multiplexed().await;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut admin)
        .await
        .unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name).map(str::to_owned))
    };
    let version = field("valkey_version:").map_or_else(
        || {
            format!(
                "redis-server {}",
                field("redis_version:").unwrap_or_default()
            )
        },
        |v| format!("valkey-server {v}"),
    );
    println!("{version}; another client EVALs {BURST} new scripts between two cycles");
    let mut other = server.multiplexed().await;
    let mut next = 0u64;
    let mut churn = async || {
        let mut pipe = redis::pipe();
        for _ in 0..BURST {
            pipe.cmd("EVAL")
                .arg(format!("return {next}"))
                .arg(0)
                .ignore();
            next += 1;
        }
        let () = pipe.query_async(&mut other).await.unwrap();
    };

    // As lockscript delivers scripts.
    reset(&mut admin).await;
    let locks = Locks::connect(&server.client()).await.unwrap();
    let started = Instant::now();
    for _ in 0..cycles {
        churn().await;
        let guard = locks.try_lock("churn").await.unwrap().expect("free");
        guard.release().await.unwrap();
    }
    let took = started.elapsed();
    let ours = counts(&mut admin).await;
    report(
        "lockscript (SCRIPT LOAD on NOSCRIPT)",
        cycles,
        took,
        &ours,
        0,
    );

    // The plain EVAL fallback, the same two scripts.
    reset(&mut admin).await;
    let mut conn = server.multiplexed().await;
    let evals = AtomicU64::new(0);
    let (take, free) = (acquire("", "", "", "", 0, 0), compare_del("", ""));
    let started = Instant::now();
    for _ in 0..cycles {
        churn().await;
        let keys = ["lock:{churn2}", "lock:{churn2}:fence"];
        eval_fallback(
            &mut conn,
            take.script(),
            &keys,
            &["t", "30000", "3630000"],
            &evals,
        )
        .await;
        eval_fallback(&mut conn, free.script(), &keys[..1], &["t"], &evals).await;
    }
    let took = started.elapsed();
    let plain = counts(&mut admin).await;
    report(
        "EVAL fallback",
        cycles,
        took,
        &plain,
        evals.load(Ordering::Relaxed),
    );
}
