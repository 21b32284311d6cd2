//! How a fair lock's release should wake the one waiter it hands the lock to: a message
//! on the waiter's own pub/sub channel (what `fair-queue.lua` does), or a push to a list
//! the waiter blocks on (`BLPOP`). Both measured in one run against a private
//! redis-server, with the plain redis crate, as the time from the release call's sending
//! to the waiter waking with the grant in hand (no further call in either case).
//!
//! ```text
//! cargo run --release -p lockscript-harness --example wakeup
//! ```
//!
//! Rounds alternate the two ways (A B A B ...), 2,000 handoffs each; the medians and
//! p99s go to stdout.

use std::time::{Duration, Instant};

use lockscript_test::history::percentile;
use lockscript_test::server::RedisServer;
use redis::AsyncCommands;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ROUNDS: usize = 10;
const PER_ROUND: usize = 200;

/// The release: delete the holder's key and tell the waiter, by `PUBLISH` or `LPUSH`.
const RELEASE: &str = "redis.call('DEL', KEYS[1]) \
    if ARGV[1] == 'publish' then redis.call('PUBLISH', KEYS[2], 'grant') \
    else redis.call('LPUSH', KEYS[2], 'grant') end return 1";

/// Runs the release script (sent whole with `EVAL`, the same for both ways).
async fn release(
    conn: &mut redis::aio::MultiplexedConnection,
    to: &str,
    how: &str,
) -> redis::RedisResult<i64> {
    redis::cmd("EVAL")
        .arg(RELEASE)
        .arg(2)
        .arg("wake:{w}")
        .arg(to)
        .arg(how)
        .query_async(conn)
        .await
}

async fn by_channel(url: &str, n: usize) -> Result<Vec<f64>, BoxError> {
    let client = redis::Client::open(url)?;
    let resp3 = redis::Client::open(format!("{url}?protocol=resp3"))?;
    let (tx, mut pushes) = tokio::sync::mpsc::unbounded_channel();
    let config = redis::AsyncConnectionConfig::new().set_push_sender(tx);
    let mut sub = resp3
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    sub.subscribe("wake:{w}:ch").await?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let _: () = conn.set("wake:{w}", "holder").await?;
        let sent = Instant::now();
        let mut to_release = conn.clone();
        let release = release(&mut to_release, "wake:{w}:ch", "publish");
        let wake = async {
            loop {
                let push = pushes.recv().await.ok_or("subscription closed")?;
                if matches!(push.kind, redis::PushKind::Message) {
                    return Ok::<Instant, BoxError>(Instant::now());
                }
            }
        };
        let (done, at) = tokio::join!(release, wake);
        done?;
        samples.push(at?.duration_since(sent).as_secs_f64() * 1e6);
    }
    Ok(samples)
}

async fn by_list(url: &str, n: usize) -> Result<Vec<f64>, BoxError> {
    let client = redis::Client::open(url)?;
    // BLPOP blocks its connection: the waiter needs one of its own.
    let waiter = client.get_multiplexed_async_connection().await?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let _: () = conn.set("wake:{w}", "holder").await?;
        // The waiter is blocked before the release is sent.
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let blocked = tokio::spawn({
            let mut waiter = waiter.clone();
            async move {
                let blpop = waiter.blpop::<_, Option<(String, String)>>("wake:{w}:list", 5.0);
                let _ = ready_tx.send(());
                let popped = blpop.await;
                (Instant::now(), popped)
            }
        });
        ready_rx.await?;
        tokio::time::sleep(Duration::from_millis(1)).await; // BLPOP reached the server
        let sent = Instant::now();
        release(&mut conn, "wake:{w}:list", "lpush").await?;
        let (woke, popped) = blocked.await?;
        popped?.ok_or("BLPOP timed out")?;
        samples.push(woke.duration_since(sent).as_secs_f64() * 1e6);
    }
    Ok(samples)
}

fn main() -> Result<(), BoxError> {
    let server = RedisServer::start();
    let url = server.url();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (mut channel, mut list) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        channel.extend(runtime.block_on(by_channel(&url, PER_ROUND))?);
        list.extend(runtime.block_on(by_list(&url, PER_ROUND))?);
    }
    for s in [&mut channel, &mut list] {
        s.sort_by(f64::total_cmp);
    }
    println!(
        "release call sent -> the waiter wakes with the grant (µs), {} handoffs each:",
        channel.len()
    );
    println!(
        "  own pub/sub channel (PUBLISH): p50 {:.1}  p99 {:.1}",
        percentile(&channel, 0.5).unwrap_or(f64::NAN),
        percentile(&channel, 0.99).unwrap_or(f64::NAN)
    );
    println!(
        "  list it blocks on (LPUSH/BLPOP): p50 {:.1}  p99 {:.1}",
        percentile(&list, 0.5).unwrap_or(f64::NAN),
        percentile(&list, 0.99).unwrap_or(f64::NAN)
    );
    Ok(())
}
