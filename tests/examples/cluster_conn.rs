//! What lockscript's own Redis Cluster connection costs against redis-rs's, measured in
//! the same run on the same private cluster (three primaries on loopback), interleaved:
//!
//! - the floor: a bare `GET` through each connection;
//! - a lock's cycle: `try_lock` + `release` on a handle over each connection;
//! - and, on lockscript's, the same with one primary cut off at its proxy (its own calls
//!   failing), to show that the others' cost does not change.
//!
//! ```text
//! cargo run --release -p lockscript-harness --example cluster_conn
//! ```

use std::time::{Duration, Instant};

use lockscript::Locks;
use lockscript_test::cluster::RedisCluster;
use lockscript_test::history::{print_latencies, quantile_ms as ms};
use lockscript_test::proxy::Proxy;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ROUNDS: usize = 2_000;

fn line(what: &str, d: &[Duration]) {
    print_latencies(what, 52, d);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let cluster = RedisCluster::start_with(3, 0, |_, node| {
        node.arg("--cluster-require-full-coverage").arg("no")
    });
    let proxies = cluster.behind_proxies();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let theirs = redis::cluster::ClusterClient::builder(urls.clone())
        .retries(0)
        .connection_timeout(Duration::from_secs(1))
        .build()?
        .get_async_connection()
        .await?;
    let ours = lockscript::ClusterConnection::connect(urls.clone()).await?;
    let (theirs_locks, ours_locks) = (Locks::new(theirs.clone()), Locks::new(ours.clone()));
    let names = cluster.one_lock_name_per_master("bench");
    let healthy: Vec<String> = names
        .iter()
        .filter(|(_, m)| *m != 2)
        .map(|(n, _)| n.clone())
        .collect();

    let (mut get_theirs, mut get_ours, mut lock_theirs, mut lock_ours) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS * 2 {
        let name = &healthy[round % healthy.len()];
        let key = format!("{{{name}}}:v");
        let start = Instant::now();
        if round % 2 == 0 {
            let _: Option<String> = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut theirs.clone())
                .await?;
            get_theirs.push(start.elapsed());
            let start = Instant::now();
            if let Some(g) = theirs_locks.try_lock(name).await? {
                g.release().await?;
            }
            lock_theirs.push(start.elapsed());
        } else {
            let _: Option<String> = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut ours.clone())
                .await?;
            get_ours.push(start.elapsed());
            let start = Instant::now();
            if let Some(g) = ours_locks.try_lock(name).await? {
                g.release().await?;
            }
            lock_ours.push(start.elapsed());
        }
    }
    println!("three primaries on loopback, {ROUNDS} each, interleaved:");
    line(
        "floor: GET through redis-rs's cluster connection",
        &get_theirs,
    );
    line("GET through lockscript::ClusterConnection", &get_ours);
    line("try_lock + release, redis-rs's connection", &lock_theirs);
    line(
        "try_lock + release, lockscript::ClusterConnection",
        &lock_ours,
    );
    println!(
        "ratio to redis-rs's (p50): GET {:.2}, lock cycle {:.2}",
        ms(&get_ours, 0.5) / ms(&get_theirs, 0.5),
        ms(&lock_ours, 0.5) / ms(&lock_theirs, 0.5)
    );

    // One primary cut off: its connections reset, new ones held unanswered.
    proxies[2].reset();
    proxies[2].set_blackhole(true);
    let mut cut = Vec::new();
    for round in 0..ROUNDS {
        let name = &healthy[round % healthy.len()];
        let start = Instant::now();
        if let Some(g) = ours_locks.try_lock(name).await? {
            g.release().await?;
        }
        cut.push(start.elapsed());
    }
    proxies[2].set_blackhole(false);
    line("try_lock + release, lockscript's, a primary cut off", &cut);
    Ok(())
}
