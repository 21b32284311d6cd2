//! What an election's followers and a multi-lock cost, against a private redis-server:
//!
//! - a follower's delay: from a leader's `campaign()` returning to an observer (another
//!   handle) returning that leader, and from `resign()` returning to the observer seeing
//!   nobody; and the handoff, from `resign()` to a waiting candidate's `campaign()`
//!   returning;
//! - a multi-lock of three names (one script call) against its floor measured in the same
//!   run on the same connection: three single locks taken one after the other.
//!
//! ```text
//! cargo run --release -p lockscript-harness --example elect
//! ```

use std::time::{Duration, Instant};

use lockscript::{Locks, RetryPolicy};
use lockscript_test::history::{print_latencies, quantile_ms as ms};
use lockscript_test::server::RedisServer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ROUNDS: usize = 300;

fn line(what: &str, d: &[Duration]) {
    print_latencies(what, 44, d);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let server = RedisServer::start();
    // Candidates move only on notifications: a backoff longer than the run.
    let patient = || async {
        Ok::<_, BoxError>(
            Locks::connect(&server.client())
                .await?
                .ttl(Duration::from_secs(30))
                .retry(RetryPolicy::new(
                    Duration::from_secs(5),
                    Duration::from_secs(5),
                )),
        )
    };
    let (leader, candidate, follower) = (patient().await?, patient().await?, patient().await?);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut observer = follower.election("bench").observe();
    tokio::spawn(async move {
        while let Ok(seen) = observer.next().await {
            if tx.send((seen.is_some(), Instant::now())).is_err() {
                return;
            }
        }
    });
    rx.recv().await; // nobody leads yet
    let (mut elected, mut gone, mut handoff) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let leadership = leader.election("bench").campaign("a").await?;
        let at = Instant::now();
        let (some, seen) = rx.recv().await.ok_or("observer stopped")?;
        assert!(some);
        elected.push(seen.saturating_duration_since(at));
        // A waiting candidate, then the resignation.
        let waiting = {
            let e = candidate.election("bench");
            tokio::spawn(async move { e.campaign("b").await })
        };
        tokio::time::sleep(Duration::from_millis(2)).await;
        let resigned = Instant::now();
        leadership.resign().await?;
        let next = waiting.await??;
        handoff.push(resigned.elapsed());
        // The follower sees nobody (or straight away the next): drain to the next.
        let mut next_seen = rx.recv().await.ok_or("observer stopped")?;
        if !next_seen.0 {
            gone.push(next_seen.1.saturating_duration_since(resigned));
            next_seen = rx.recv().await.ok_or("observer stopped")?;
        }
        next.resign().await?;
        let (some, _) = rx.recv().await.ok_or("observer stopped")?;
        assert!(!some || next_seen.0);
    }
    println!("election, {ROUNDS} rounds, one redis-server on loopback:");
    line("campaign() returned -> follower sees it", &elected);
    line("resign() sent -> follower sees nobody", &gone);
    line("resign() sent -> waiting candidate leads", &handoff);

    // Multi-lock against its floor, interleaved.
    let locks = Locks::connect(&server.client()).await?;
    let names = ["m:a", "m:b", "m:c"];
    let (mut multi, mut singles) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS * 2 {
        let start = Instant::now();
        if round % 2 == 0 {
            locks.lock_all(&names).await?.release().await?;
            multi.push(start.elapsed());
        } else {
            let mut held = Vec::new();
            for n in names {
                held.push(locks.lock(n).await?);
            }
            for g in held {
                g.release().await?;
            }
            singles.push(start.elapsed());
        }
    }
    println!("three names, lock and release, {ROUNDS} each, interleaved:");
    line("lock_all (one call) + release", &multi);
    line("floor: three lock() in turn + releases", &singles);
    println!("ratio (p50): {:.2}", ms(&multi, 0.5) / ms(&singles, 0.5));
    Ok(())
}
