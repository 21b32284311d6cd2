//! Mutual exclusion across OS processes: this test binary starts copies of itself as
//! contenders against one private redis-server, each recording every grant as
//! (fencing token, start, end) on the shared wall clock; the merged history must show
//! no overlap and strictly rising fences.

use std::time::Duration;

use lock_runtime::Locks;
use lockscript_tests::contenders::{self, now_ns};
use lockscript_tests::server::RedisServer;

const URL_VAR: &str = "LOCKSCRIPT_CONTENDER_URL";
const PROCESSES: usize = 4;
const TASKS: usize = 3;
const ROUNDS: usize = 12;

/// One contender process: prints a `fence start end` line per grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by processes_never_overlap_and_fences_rise"]
async fn contender_process() {
    let Ok(url) = std::env::var(URL_VAR) else {
        return;
    };
    let client = redis::Client::open(url).unwrap();
    let locks = Locks::connect(&client)
        .await
        .unwrap()
        .wait_timeout(Duration::from_secs(30));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let locks = locks.clone();
        tasks.push(tokio::spawn(async move {
            let mut lines = Vec::new();
            for _ in 0..ROUNDS {
                let guard = locks.lock("contended").await.unwrap();
                let start = now_ns();
                tokio::time::sleep(Duration::from_micros(200)).await;
                let end = now_ns();
                lines.push(contenders::grant_line(guard.fencing_token(), start, end));
                guard.release().await.unwrap();
            }
            lines
        }));
    }
    for task in tasks {
        for line in task.await.unwrap() {
            println!("{line}");
        }
    }
}

#[test]
fn processes_never_overlap_and_fences_rise() {
    let server = RedisServer::start();
    let mut history = contenders::run("contender_process", (URL_VAR, &server.url()), PROCESSES);
    assert_eq!(
        history.len(),
        PROCESSES * TASKS * ROUNDS,
        "every grant was recorded"
    );
    lockscript_tests::history::assert_exclusive(&mut history);
}
