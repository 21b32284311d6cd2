//! Mutual exclusion across OS processes: this test binary starts copies of itself as
//! contenders against one private redis-server, each recording every grant as
//! (fencing token, start, end) on the shared wall clock; the merged history must show
//! no overlap and strictly rising fences. The same in fair mode, where every grant but
//! the first few comes by handoff from the queue.

use std::time::Duration;

use lockscript::Locks;
use lockscript_test::contenders;
use lockscript_test::server::RedisServer;

const URL_VAR: &str = "LOCKSCRIPT_CONTENDER_URL";
const PROCESSES: usize = 4;
const TASKS: usize = 3;
const ROUNDS: usize = 12;

/// One contender process: prints a `fence start end` line per grant (in fair mode
/// when `fair`).
async fn contend(fair: bool) {
    let Ok(url) = std::env::var(URL_VAR) else {
        return;
    };
    let client = redis::Client::open(url).unwrap();
    let locks = Locks::connect(&client)
        .await
        .unwrap()
        .fair(fair)
        .wait_timeout(Duration::from_secs(30));
    contenders::contend(TASKS, ROUNDS, Duration::from_micros(200), move || {
        let locks = locks.clone();
        async move {
            let guard = locks.lock("contended").await.unwrap();
            (guard.fencing_token(), async move {
                guard.release().await.unwrap();
            })
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by processes_never_overlap_and_fences_rise"]
async fn contender_process() {
    contend(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by fair_processes_never_overlap_and_fences_rise"]
async fn fair_contender_process() {
    contend(true).await;
}

#[test]
fn fair_processes_never_overlap_and_fences_rise() {
    let server = RedisServer::start();
    let mut history = contenders::run(
        "fair_contender_process",
        (URL_VAR, &server.url()),
        PROCESSES,
    );
    assert_eq!(
        history.len(),
        PROCESSES * TASKS * ROUNDS,
        "every grant was recorded"
    );
    lockscript_test::history::assert_exclusive(&mut history);
    // Nothing is left: the queue emptied with the last release.
    let mut conn = server.connection();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("lock:{contended}*")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        keys,
        ["lock:{contended}:fence"],
        "only the fencing counter stays"
    );
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
    lockscript_test::history::assert_exclusive(&mut history);
}
