//! Fencing that reaches a real database: a holder process frozen (SIGSTOP) past its lease
//! resumes and writes to PostgreSQL, after another process took the lock and wrote.
//!
//! - The per-row fenced upsert (`lockscript::sql::FencedUpsert`) refuses the stale write
//!   to the row the newer holder wrote, and the row keeps the newer value; but it lets the
//!   stale holder update every other row, insert new ones, re-insert a row the newer
//!   holder deleted, and delete (shown, so the per-lock tests are known to fail with it).
//! - The per-lock fence (`LockFencedUpsert`, `LockFencedDelete`) refuses all of those,
//!   and the fresh holder's writes always go through.
//! - Concurrent writers of one lock: the rows accepted, in the order PostgreSQL wrote them,
//!   carry tokens that never go down.
//! - The fenced delete's documented caveat in `READ COMMITTED` (a row an accepted writer
//!   inserted while the delete waited is not seen) and its remedy in `REPEATABLE READ`.
//!
//! Private redis-server and PostgreSQL, started by the harness.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use lockscript::Locks;
use lockscript::sql::{FencedUpsert, LockFencedDelete, LockFencedUpsert};
use lockscript_test::postgres::PostgresServer;
use lockscript_test::server::RedisServer;

const REDIS_VAR: &str = "LOCKSCRIPT_PG_HOLDER_REDIS";
const PG_VAR: &str = "LOCKSCRIPT_PG_HOLDER_PG";
/// Which fence the cross-row holder writes through: `lock` or `row`.
const MODE_VAR: &str = "LOCKSCRIPT_PG_HOLDER_MODE";

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

/// The rows of the cross-row story, made before the holder runs: `r-other` (the newer
/// holder never writes it), `r-deleted` (it deletes it), `r-keep` (the stale holder tries
/// to delete it); `r-main` is written by the newer holder, `r-new` by nobody.
const SEEDED: [&str; 3] = ["r-other", "r-deleted", "r-keep"];

/// What the stale holder tries after it resumes, each printed as `RESULT <op> <accepted>`.
const STALE_OPS: [&str; 5] = [
    "same-row",
    "other-row",
    "new-row",
    "reinsert-deleted",
    "delete",
];

/// One fenced write, through the lock fence (`lock`) or the per-row one (`row`); whether
/// the fence accepted it.
async fn fenced(pg: &tokio_postgres::Client, mode: &str, op: &str, fence: u64) -> bool {
    let token = i64::try_from(fence).expect("a fencing token fits a BIGINT");
    let id = match op {
        "same-row" => "r-main",
        "other-row" => "r-other",
        "new-row" => "r-new",
        "reinsert-deleted" | "delete-deleted" => "r-deleted",
        "delete" => "r-keep",
        _ => panic!("unknown op {op}"),
    };
    let body = format!("{op} by {fence}");
    let deleting = op.starts_with("delete");
    if mode == "lock" {
        let sql = if deleting {
            LockFencedDelete::new("reports", &["id"]).unwrap().sql()
        } else {
            LockFencedUpsert::new("reports", &["id"], &["body"])
                .unwrap()
                .sql()
        };
        let row = if deleting {
            pg.query_one(&sql, &[&id, &"report", &token]).await
        } else {
            pg.query_one(&sql, &[&id, &body, &"report", &token]).await
        }
        .expect("the lock-fenced statement");
        let accepted: bool = row.get("accepted");
        let rows: i64 = row.get("rows");
        assert_eq!(
            rows,
            i64::from(accepted),
            "{op}: a row written iff accepted"
        );
        accepted
    } else {
        // The per-row way: each row's own fence column, and a delete that checks it.
        let rows = if deleting {
            pg.execute(
                "DELETE FROM per_row WHERE id = $1 AND fence <= $2",
                &[&id, &token],
            )
            .await
        } else {
            let sql = FencedUpsert::new("per_row", &["id"], &["body"])
                .unwrap()
                .sql();
            pg.execute(&sql, &[&id, &body, &token]).await
        }
        .expect("the per-row statement");
        rows == 1
    }
}

/// The holder of the cross-row story: takes the lock, checks it, is frozen past its lease
/// by the parent, then tries every write of [`STALE_OPS`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by the cross-row tests"]
async fn cross_row_writer_process() {
    let (Ok(redis_url), Ok(pg_conn), Ok(mode)) = (
        std::env::var(REDIS_VAR),
        std::env::var(PG_VAR),
        std::env::var(MODE_VAR),
    ) else {
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
    for op in STALE_OPS {
        let accepted = fenced(&pg, &mode, op, guard.fencing_token()).await;
        println!("RESULT {op} {accepted}");
    }
    println!("DONE lost={}", guard.is_lost());
}

/// Runs the cross-row story with `mode`'s fence; the stale holder's results by op, and
/// the fresh holder's guard (still held).
async fn cross_row_story(
    mode: &str,
) -> (
    Vec<(String, bool)>,
    tokio_postgres::Client,
    lockscript::LockGuard<redis::aio::ConnectionManager>,
    PostgresServer,
    RedisServer,
) {
    let server = RedisServer::start();
    let postgres = PostgresServer::start();
    let pg = pg_connect(&postgres.connection_string()).await;
    pg.batch_execute(
        "CREATE TABLE reports (id TEXT PRIMARY KEY, body TEXT NOT NULL);
         CREATE TABLE per_row (id TEXT PRIMARY KEY, body TEXT NOT NULL, fence BIGINT NOT NULL)",
    )
    .await
    .unwrap();
    pg.batch_execute(
        &LockFencedUpsert::new("reports", &["id"], &["body"])
            .unwrap()
            .create_fence_table(),
    )
    .await
    .unwrap();
    for id in SEEDED {
        pg.execute("INSERT INTO reports VALUES ($1, 'seed')", &[&id])
            .await
            .unwrap();
        pg.execute("INSERT INTO per_row VALUES ($1, 'seed', 0)", &[&id])
            .await
            .unwrap();
    }

    let mut child = lockscript_test::ignored_test_process("cross_row_writer_process")
        .env(REDIS_VAR, server.url())
        .env(PG_VAR, postgres.connection_string())
        .env(MODE_VAR, mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let hold: Option<u64> = lines.by_ref().map_while(Result::ok).find_map(|l| {
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

    // The fresh holder: takes over once the frozen lease ended, writes its row and
    // deletes one; both go through.
    let locks = Locks::connect(&server.client()).await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), locks.lock("report"))
        .await
        .expect("the takeover")
        .unwrap();
    assert!(guard.fencing_token() > hold);
    for op in ["same-row", "delete-deleted"] {
        assert!(
            fenced(&pg, mode, op, guard.fencing_token()).await,
            "the fresh holder's {op} goes through"
        );
    }

    signal("-CONT");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "the holder process failed: {stderr}");
    assert!(
        rest.iter().any(|l| l == "DONE lost=true"),
        "the holder knew its lease was lost when it wrote: {rest:?} {stderr}"
    );
    let results: Vec<(String, bool)> = rest
        .iter()
        .filter_map(|l| l.split_once("RESULT "))
        .map(|(_, r)| {
            let (op, accepted) = r.trim().split_once(' ').unwrap();
            (op.to_owned(), accepted == "true")
        })
        .collect();
    assert_eq!(
        results
            .iter()
            .map(|(op, _)| op.as_str())
            .collect::<Vec<_>>(),
        STALE_OPS,
        "{stderr}"
    );
    (results, pg, guard, postgres, server)
}

/// The rows of `table`, `id -> body`.
async fn rows(pg: &tokio_postgres::Client, table: &str) -> Vec<(String, String)> {
    pg.query(&format!("SELECT id, body FROM {table} ORDER BY id"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_is_refused_on_every_row_by_the_lock_fence() {
    let (results, pg, guard, _postgres, _server) = cross_row_story("lock").await;
    for (op, accepted) in &results {
        assert!(
            !accepted,
            "the stale holder's {op} was refused: {results:?}"
        );
    }
    let fresh = guard.fencing_token();
    let expected: Vec<(String, String)> = [
        ("r-keep", "seed".to_owned()),
        ("r-main", format!("same-row by {fresh}")),
        ("r-other", "seed".to_owned()),
    ]
    .into_iter()
    .map(|(id, body)| (id.to_owned(), body))
    .collect();
    assert_eq!(rows(&pg, "reports").await, expected, "nothing stale landed");
    let fence: i64 = pg
        .query_one("SELECT fence FROM lock_fences WHERE lock = 'report'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        u64::try_from(fence).unwrap(),
        fresh,
        "the fence stays the fresh one"
    );
    // The fresh holder can still do all of it, with the same token.
    for op in STALE_OPS {
        assert!(
            fenced(&pg, "lock", op, fresh).await,
            "the fresh holder's {op} goes through"
        );
    }
    assert_eq!(
        rows(&pg, "reports").await.len(),
        4,
        "r-main, r-other, r-new and r-deleted written, r-keep deleted"
    );
    guard.release().await.unwrap();
}

/// Why the per-lock fence exists: the per-row statement, in the same story, accepts every
/// stale write to a row the fresh holder did not write (so the test above fails with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_row_fence_lets_a_stale_holder_write_rows_the_fresh_holder_did_not() {
    let (results, pg, guard, _postgres, _server) = cross_row_story("row").await;
    let accepted: Vec<(&str, bool)> = results.iter().map(|(op, a)| (op.as_str(), *a)).collect();
    assert_eq!(
        accepted,
        [
            ("same-row", false),
            ("other-row", true),
            ("new-row", true),
            ("reinsert-deleted", true),
            ("delete", true),
        ]
    );
    let stale = rows(&pg, "per_row").await;
    assert!(
        stale
            .iter()
            .any(|(id, body)| id == "r-deleted" && body.starts_with("reinsert-deleted")),
        "the row the fresh holder deleted is back: {stale:?}"
    );
    guard.release().await.unwrap();
}

/// Many writers of one lock at once, each with its own token, on 8 connections, each
/// inserting a new row: in the order PostgreSQL inserted them (a sequence drawn inside
/// the statement, after the fence step), the accepted tokens never go down, and every
/// refused write had a token below one accepted before it. With the per-row statement,
/// every write of a new row is accepted, tokens out of order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_of_one_lock_are_accepted_in_token_order_only() {
    const WRITES: i64 = 400;
    let postgres = PostgresServer::start();
    let setup = pg_connect(&postgres.connection_string()).await;
    setup
        .batch_execute(
            "CREATE TABLE log (id BIGINT PRIMARY KEY, token BIGINT NOT NULL, \
                 seq BIGSERIAL NOT NULL);
             CREATE TABLE per_row_log (id BIGINT PRIMARY KEY, token BIGINT NOT NULL, \
                 fence BIGINT NOT NULL, seq BIGSERIAL NOT NULL)",
        )
        .await
        .unwrap();
    let by_lock = LockFencedUpsert::new("log", &["id"], &["token"]).unwrap();
    setup
        .batch_execute(&by_lock.create_fence_table())
        .await
        .unwrap();
    let by_row = FencedUpsert::new("per_row_log", &["id"], &["token"]).unwrap();
    let mut tasks = Vec::new();
    for conn in 0..8_i64 {
        let client = pg_connect(&postgres.connection_string()).await;
        let (by_lock, by_row) = (by_lock.sql(), by_row.sql());
        tasks.push(tokio::spawn(async move {
            let mut accepted = 0;
            for i in (conn..WRITES).step_by(8) {
                // Tokens in a scrambled order: 0..400 permuted.
                let token = (i * 7919) % WRITES;
                let row = client
                    .query_one(&by_lock, &[&i, &token, &"log", &token])
                    .await
                    .unwrap();
                accepted += i64::from(row.get::<_, bool>("accepted"));
                client
                    .execute(&by_row, &[&i, &token, &token])
                    .await
                    .unwrap();
            }
            accepted
        }));
    }
    let mut accepted = 0;
    for task in tasks {
        accepted += task.await.unwrap();
    }
    let in_order = |table: &str| {
        let setup = &setup;
        let sql = format!("SELECT token FROM {table} ORDER BY seq");
        async move {
            setup
                .query(&sql, &[])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<_, i64>(0))
                .collect::<Vec<i64>>()
        }
    };
    let tokens = in_order("log").await;
    assert_eq!(i64::try_from(tokens.len()).unwrap(), accepted);
    assert!(accepted > 1, "some writes got through: {accepted}");
    assert!(
        tokens.windows(2).all(|w| w[0] <= w[1]),
        "accepted tokens in the order written never go down: {tokens:?}"
    );
    let fence: i64 = setup
        .query_one("SELECT fence FROM lock_fences WHERE lock = 'log'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        Some(&fence),
        tokens.last(),
        "the fence is the last token accepted"
    );
    let per_row = in_order("per_row_log").await;
    assert_eq!(
        i64::try_from(per_row.len()).unwrap(),
        WRITES,
        "all accepted"
    );
    assert!(
        per_row.windows(2).any(|w| w[0] > w[1]),
        "the per-row statement took tokens out of order"
    );
}

/// Waits until some session of `pg`'s server waits for a lock (a row lock of the fence).
async fn until_a_session_waits_for_a_lock(pg: &tokio_postgres::Client) {
    for _ in 0..200 {
        let waiting: i64 = pg
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no session waited for the fence row");
}

/// The documented caveat of a fenced delete, and its remedy: in `READ COMMITTED` a delete
/// that waited for the fence row while an accepted (not stale) writer inserted its row
/// does not see that row; in `REPEATABLE READ` the same race is a serialization error,
/// and the retry deletes it. Either way nothing stale is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_racing_an_earlier_insert_misses_it_in_read_committed_and_fails_in_repeatable_read()
 {
    let postgres = PostgresServer::start();
    let conn = postgres.connection_string();
    let setup = pg_connect(&conn).await;
    setup
        .batch_execute("CREATE TABLE reports (id TEXT PRIMARY KEY, body TEXT NOT NULL)")
        .await
        .unwrap();
    let upsert = LockFencedUpsert::new("reports", &["id"], &["body"]).unwrap();
    setup
        .batch_execute(&upsert.create_fence_table())
        .await
        .unwrap();
    let delete = LockFencedDelete::new("reports", &["id"]).unwrap().sql();

    for (isolation, id, fences) in [
        ("READ COMMITTED", "r-1", (5_i64, 6_i64)),
        ("REPEATABLE READ", "r-2", (7, 8)),
    ] {
        // The earlier holder inserts, inside a transaction still open: it holds the
        // fence row.
        let earlier = pg_connect(&conn).await;
        earlier.batch_execute("BEGIN").await.unwrap();
        let row = earlier
            .query_one(&upsert.sql(), &[&id, &"earlier", &"report", &fences.0])
            .await
            .unwrap();
        assert!(row.get::<_, bool>("accepted"));
        // The later holder deletes: its statement's snapshot is taken, then it waits.
        let later = pg_connect(&conn).await;
        let (sql, id_owned) = (delete.clone(), id.to_owned());
        let deleting = tokio::spawn(async move {
            later
                .batch_execute(&format!("BEGIN ISOLATION LEVEL {isolation}"))
                .await
                .unwrap();
            let result = later
                .query_one(&sql, &[&id_owned, &"report", &fences.1])
                .await
                .map(|row| (row.get::<_, bool>("accepted"), row.get::<_, i64>("rows")));
            let _ = later.batch_execute("COMMIT").await;
            result
        });
        until_a_session_waits_for_a_lock(&setup).await;
        earlier.batch_execute("COMMIT").await.unwrap();
        let result = deleting.await.unwrap();
        let left: i64 = setup
            .query_one("SELECT count(*) FROM reports WHERE id = $1", &[&id])
            .await
            .unwrap()
            .get(0);
        if isolation == "READ COMMITTED" {
            assert_eq!(
                result.unwrap(),
                (true, 0),
                "accepted, but the row was not seen"
            );
            assert_eq!(
                left, 1,
                "the earlier holder's row survived the later delete"
            );
        } else {
            let err = result.expect_err("a serialization error");
            assert_eq!(
                err.code(),
                Some(&tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE),
                "{err}"
            );
            // The retry sees the row and deletes it.
            let row = setup
                .query_one(&delete, &[&id, &"report", &fences.1])
                .await
                .unwrap();
            assert_eq!(
                (row.get::<_, bool>("accepted"), row.get::<_, i64>("rows")),
                (true, 1)
            );
        }
    }
}
