//! What an idle lock name costs the server: locks and releases N distinct names (default
//! 1,000,000) on a private redis-server, and reports keys and `used_memory` before, right
//! after (every name's fencing counter still alive: what a counter that never expires
//! leaves forever), and once the counters' retention has passed.
//!
//! ```console
//! $ cargo run --release -p lockscript-harness --example fence_memory [-- NAMES [RETENTION_SECS]]
//! ```
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockscript::Locks;
use lockscript_test::server::RedisServer;

/// Names locked at once: enough to keep the server busy over one connection.
const IN_FLIGHT: usize = 256;

#[derive(Clone, Copy)]
struct Usage {
    keys: u64,
    used_memory: u64,
}

async fn usage(conn: &mut redis::aio::MultiplexedConnection) -> Usage {
    let keys: u64 = redis::cmd("DBSIZE").query_async(conn).await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .unwrap();
    let used_memory = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO memory has used_memory");
    Usage { keys, used_memory }
}

// Figures for people: byte counts far below 2^52 are exact as f64.
#[allow(clippy::cast_precision_loss)]
fn show(label: &str, u: Usage, base: Usage, names: usize) {
    let per_name = (u.used_memory.saturating_sub(base.used_memory)) as f64 / names as f64;
    println!(
        "{label:<34} keys {:>9}  used_memory {:>7.1} MiB  {per_name:>6.1} bytes per name",
        u.keys,
        u.used_memory as f64 / (1024.0 * 1024.0)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let names: usize = args.next().map_or(1_000_000, |a| a.parse().expect("NAMES"));
    let retention = Duration::from_secs(
        args.next()
            .map_or(10, |a| a.parse().expect("RETENTION_SECS")),
    );
    let server = RedisServer::start();
    let mut admin = server.multiplexed().await;
    let locks = Locks::connect(&server.client())
        .await
        .unwrap()
        .ttl(Duration::from_secs(30))
        .fence_retention(retention);
    // Warm: the scripts cached, the connections open.
    let warm = locks.try_lock("warm").await.unwrap().expect("free");
    warm.release().await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg("lock:{warm}:fence")
        .query_async(&mut admin)
        .await
        .unwrap();
    let base = usage(&mut admin).await;

    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let (locks, next) = (locks.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= names {
                        break;
                    }
                    let guard = locks.try_lock(&format!("orders:{n}")).await.unwrap();
                    guard
                        .expect("a fresh name is free")
                        .release()
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let took = started.elapsed();
    let after = usage(&mut admin).await;

    // Past the retention (plus the server's active expiry, which samples keys with a TTL).
    let deadline = Instant::now() + retention + Duration::from_secs(120);
    tokio::time::sleep(retention).await;
    let mut expired = usage(&mut admin).await;
    while expired.keys > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        expired = usage(&mut admin).await;
    }
    let cleared = started.elapsed().saturating_sub(took);

    #[allow(clippy::cast_precision_loss)]
    let rate = names as f64 / took.as_secs_f64();
    println!(
        "{names} distinct names locked and released in {:.1} s ({:.0} per second), fence_retention {retention:?}",
        took.as_secs_f64(),
        rate
    );
    show("before", base, base, names);
    show("after (a counter per name)", after, base, names);
    show(
        &format!("{:.0} s later (retention passed)", cleared.as_secs_f64()),
        expired,
        base,
        names,
    );
}
