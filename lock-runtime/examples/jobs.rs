//! A service that takes a lock per job: workers (here tasks; in production, the replicas
//! of a service) go through the same job list, and `with_lock` lets one worker at a time
//! look at a job, so each job is done exactly once.
//!
//! ```console
//! $ cargo run -p lockscript --example jobs -- redis://127.0.0.1:6379/
//! ```
use std::time::Duration;

use lockscript::Locks;
use redis::AsyncCommands;

const JOBS: [&str; 4] = ["invoice:1", "invoice:2", "invoice:3", "invoice:4"];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".to_owned());
    let client = redis::Client::open(url)?;
    let locks = Locks::connect(&client)
        .await?
        .ttl(Duration::from_secs(10))
        .wait_timeout(Duration::from_secs(5));
    let conn = client.get_multiplexed_async_connection().await?;
    let _: () = conn.clone().del("jobs:done").await?;

    let mut workers = Vec::new();
    for worker in 0..3 {
        let (locks, conn) = (locks.clone(), conn.clone());
        workers.push(tokio::spawn(async move {
            let mut did = Vec::new();
            // Each worker starts at a different job, as replicas that woke at different times.
            for k in 0..JOBS.len() {
                let job = JOBS[(k + worker) % JOBS.len()];
                let mut conn = conn.clone();
                // Released when the closure ends; if the lease is lost while it runs, the
                // closure is cancelled and the call returns `LockError::Lost`.
                let outcome = locks
                    .with_lock(&format!("job:{job}"), |lease| async move {
                        let done: bool = conn.sismember("jobs:done", job).await?;
                        if done {
                            return Ok::<_, redis::RedisError>(None);
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await; // the work
                        let _: () = conn.sadd("jobs:done", job).await?;
                        Ok(Some(lease.fencing_token()))
                    })
                    .await?;
                if let Some(fence) = outcome? {
                    did.push(format!("worker {worker} did {job} (fencing token {fence})"));
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(did)
        }));
    }
    let mut runs = 0;
    for worker in workers {
        for line in worker.await?.map_err(|e| e.to_string())? {
            println!("{line}");
            runs += 1;
        }
    }
    println!("{runs} jobs done, each once");
    Ok(())
}
