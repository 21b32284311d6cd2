//! Leader election: candidates compete for one lock with a long lease that the watchdog
//! keeps renewing; the leader works until its term ends or `lost()` says the lease is
//! gone (the server was unreachable for longer than the lease, say), and then stops at
//! once: after `lost()` another candidate may already lead.
//!
//! ```console
//! $ cargo run -p lockscript --example leader -- redis://127.0.0.1:6379/
//! ```
use std::time::Duration;

use lockscript::Locks;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".to_owned());
    let client = redis::Client::open(url)?;
    // Long lease, renewed by the watchdog (on by default) every third of it.
    let locks = Locks::connect(&client)
        .await?
        .ttl(Duration::from_secs(15))
        .wait_timeout(Duration::from_secs(10));

    let mut candidates = Vec::new();
    for id in 0..3 {
        let locks = locks.clone();
        candidates.push(tokio::spawn(async move {
            let guard = locks.lock("leader:billing").await?;
            println!("candidate {id} leads (term {})", guard.fencing_token());
            let mut ticks = 0;
            let term = async {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await; // leader's work
                    ticks += 1;
                    if ticks == 5 {
                        break;
                    }
                }
            };
            tokio::select! {
                () = term => {
                    println!("candidate {id} steps down after {ticks} ticks");
                    guard.release().await?;
                }
                () = guard.lost() => {
                    println!("candidate {id} lost the lease: stop acting as leader now");
                }
            }
            Ok::<_, lockscript::LockError>(())
        }));
    }
    for candidate in candidates {
        candidate.await??;
    }
    Ok(())
}
