//! Fencing that reaches a real database: a holder process frozen (SIGSTOP) past its lease
//! resumes and writes to PostgreSQL, after another process took the lock and wrote. The
//! fenced upsert (`lockscript::sql::FencedUpsert`) refuses the stale write, and the row
//! keeps the newer value. Private redis-server and PostgreSQL, started by the harness.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use lockscript::Locks;
use lockscript::sql::FencedUpsert;
use lockscript_test::postgres::PostgresServer;
use lockscript_test::server::RedisServer;

const REDIS_VAR: &str = "LOCKSCRIPT_PG_HOLDER_REDIS";
const PG_VAR: &str = "LOCKSCRIPT_PG_HOLDER_PG";

async fn pg_connect(conn: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(conn, tokio_postgres::NoTls)
        .await
        .expect("connect to the private PostgreSQL");
    tokio::spawn(connection);
    client
}

fn upsert() -> FencedUpsert {
    FencedUpsert::new("reports", &["id"], &["body"]).unwrap()
}

/// Writes `body` to report `r-1` with `fence`; the rows the statement affected.
async fn write(pg: &tokio_postgres::Client, body: &str, fence: u64) -> u64 {
    let fence = i64::try_from(fence).expect("a fencing token fits a BIGINT");
    pg.execute(&upsert().sql(), &[&"r-1", &body, &fence])
        .await
        .expect("the fenced upsert")
}

/// The holder process: takes the lock, checks it still holds it, and is frozen by the
/// parent right after that check, past its lease; then it writes, as code does that
/// checked first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by a_stale_holder_is_refused_by_postgresql"]
async fn fenced_writer_process() {
    let (Ok(redis_url), Ok(pg_conn)) = (std::env::var(REDIS_VAR), std::env::var(PG_VAR)) else {
        return;
    };
    let locks = Locks::connect(&redis::Client::open(redis_url).unwrap())
        .await
        .unwrap()
        .ttl(Duration::from_millis(400));
    let pg = pg_connect(&pg_conn).await;
    let guard = locks.lock("report").await.unwrap();
    println!("HOLD {}", guard.fencing_token());
    assert!(!guard.is_lost());
    println!("CHECKED");
    // The parent stops this process here, for longer than the lease.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rows = write(&pg, "stale", guard.fencing_token()).await;
    println!("RESULT rows={rows} lost={}", guard.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_is_refused_by_postgresql() {
    let server = RedisServer::start();
    let postgres = PostgresServer::start();
    let pg = pg_connect(&postgres.connection_string()).await;
    pg.batch_execute(
        "CREATE TABLE reports (id TEXT PRIMARY KEY, body TEXT NOT NULL, fence BIGINT NOT NULL)",
    )
    .await
    .unwrap();

    let mut child = lockscript_test::ignored_test_process("fenced_writer_process")
        .env(REDIS_VAR, server.url())
        .env(PG_VAR, postgres.connection_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let hold: Option<u64> = lines
        .by_ref()
        .map_while(Result::ok)
        // libtest's "test ... " may precede the first line on the same line.
        .find_map(|l| {
            l.split_once("HOLD ")
                .map(|(_, f)| f.trim().parse().unwrap())
        });
    let Some(hold) = hold else {
        let out = child.wait_with_output().unwrap();
        panic!(
            "the holder did not acquire: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    assert!(
        lines.by_ref().map_while(Result::ok).any(|l| l == "CHECKED"),
        "the holder checked its lease"
    );
    let pid = child.id().to_string();
    let signal = |sig: &str| {
        assert!(
            Command::new("kill")
                .args([sig, &pid])
                .status()
                .unwrap()
                .success()
        );
    };
    signal("-STOP");

    // Meanwhile another process's turn: its lock() waits for the frozen lease to end.
    let locks = Locks::connect(&server.client()).await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), locks.lock("report"))
        .await
        .expect("the takeover")
        .unwrap();
    assert!(guard.fencing_token() > hold);
    assert_eq!(
        write(&pg, "fresh", guard.fencing_token()).await,
        1,
        "written"
    );
    // The same holder may write again with its token.
    assert_eq!(
        write(&pg, "fresh", guard.fencing_token()).await,
        1,
        "written again"
    );

    signal("-CONT");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let result = rest
        .iter()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.trim()))
        .unwrap_or_else(|| panic!("no result from the holder: {stderr}"));
    assert_eq!(
        result, "rows=0 lost=true",
        "the stale write affected no row"
    );
    assert!(out.status.success(), "the holder process failed: {stderr}");

    let row = pg
        .query_one("SELECT body, fence FROM reports WHERE id = 'r-1'", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, &str>(0), "fresh", "the newer value stands");
    assert_eq!(
        u64::try_from(row.get::<_, i64>(1)).unwrap(),
        guard.fencing_token()
    );
    guard.release().await.unwrap();
}
