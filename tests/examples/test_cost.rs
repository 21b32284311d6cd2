//! What a `TestRedis` costs a test: the first (a private server starts) and the next
//! ones (a pooled server is emptied and the scripts loaded again). Prints medians.
//!
//! ```console
//! $ cargo run --release -p lockscript-harness --example test_cost
//! ```
use std::time::{Duration, Instant};

use lockscript_test::TestRedis;

fn main() {
    let start = Instant::now();
    let first = TestRedis::start();
    let first_cost = start.elapsed();
    drop(first);
    let mut next: Vec<Duration> = (0..200)
        .map(|_| {
            let start = Instant::now();
            let redis = TestRedis::start();
            let cost = start.elapsed();
            drop(redis);
            cost
        })
        .collect();
    next.sort();
    println!("first test (server starts): {first_cost:?}");
    println!(
        "next tests (pooled server reset): median {:?}, p99 {:?}",
        next[next.len() / 2],
        next[next.len() * 99 / 100]
    );
}
