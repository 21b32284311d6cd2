//! Leader election: three candidates campaign for `billing`; the leader proclaims its
//! address, works with its term as a fencing token until its term ends or `lost()` says
//! the lease is gone (after `lost()` another candidate may already lead), then resigns; a
//! follower observes every change of leader as it happens.
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

    // A follower: the current leader first, then each change.
    let mut observer = locks.election("billing").observe();
    let follower = tokio::spawn(async move {
        loop {
            match observer.next().await {
                Ok(Some(leader)) => {
                    println!("follower: {} leads in term {}", leader.value, leader.term);
                }
                Ok(None) => println!("follower: nobody leads"),
                Err(e) => eprintln!("follower: cannot read the leader: {e}"),
            }
        }
    });

    let mut candidates = Vec::new();
    for id in 0..3 {
        let election = locks.election("billing");
        candidates.push(tokio::spawn(async move {
            let address = format!("10.0.0.{id}:8080");
            let leadership = election.campaign(&address).await?;
            let term = leadership.term(); // pass it with every write: a fenced store refuses older terms
            println!("candidate {id} leads in term {term}");
            let work = tokio::time::sleep(Duration::from_millis(50)); // the leader's work
            tokio::select! {
                () = work => {
                    println!("candidate {id} resigns");
                    leadership.resign().await?;
                }
                () = leadership.lost() => {
                    println!("candidate {id} lost its lease: stop acting as leader now");
                }
            }
            Ok::<_, lockscript::LockError>(())
        }));
    }
    for candidate in candidates {
        candidate.await??;
    }
    // The follower sees the last resignation within a millisecond or so.
    tokio::time::sleep(Duration::from_millis(100)).await;
    follower.abort();
    Ok(())
}
