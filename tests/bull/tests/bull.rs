//! bull's scripts with includes, run under a real, private Redis.

use bull_scripts::{add_job, promote};
use lockscript::LockError;
use lockscript_test::TestRedis;

const Q: &str = "bull:q:";

/// The job options as bull sends them: `cmsgpack` of the JSON text `{}`.
const NO_OPTS: &[u8] = &[0xa2, b'{', b'}'];

fn add(conn: &mut redis::Connection, delay_until: u64, priority: u64) -> String {
    add_job(
        "bull:q:wait",
        "bull:q:paused",
        "bull:q:meta-paused",
        "bull:q:id",
        "bull:q:delayed",
        "bull:q:priority",
        Q,
        "",
        "email",
        "{\"to\":\"a@b\"}",
        NO_OPTS,
        1_700_000_000_000,
        0,
        delay_until,
        priority,
        "LPUSH",
        "t1",
        "",
        "",
        "",
    )
    .invoke(conn)
    .expect("addJob runs")
}

#[lockscript_test::test]
fn add_job_with_its_includes_adds_a_waiting_job(conn: &mut redis::Connection) {
    assert_eq!(add(conn, 0, 0), "1");
    assert_eq!(add(conn, 0, 0), "2");
    let wait: Vec<String> = redis::cmd("LRANGE")
        .arg("bull:q:wait")
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap();
    assert_eq!(wait, ["2", "1"]);
    let name: String = redis::cmd("HGET")
        .arg("bull:q:1")
        .arg("name")
        .query(conn)
        .unwrap();
    assert_eq!(name, "email");
}

#[lockscript_test::test]
fn a_prioritised_job_goes_through_the_included_add_job_with_priority(
    conn: &mut redis::Connection,
) {
    add(conn, 0, 0);
    add(conn, 0, 5);
    let score: f64 = redis::cmd("ZSCORE")
        .arg("bull:q:priority")
        .arg("2")
        .query(conn)
        .unwrap();
    assert_eq!(score, 5.0);
    let wait: Vec<String> = redis::cmd("LRANGE")
        .arg("bull:q:wait")
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap();
    assert_eq!(wait.len(), 2);
}

#[lockscript_test::test]
fn promote_moves_a_delayed_job_to_the_paused_list_the_include_picks(redis: &TestRedis) {
    let mut conn = redis.connection();
    let id = add(&mut conn, 1_700_000_060_000, 0);
    let delayed: Vec<String> = redis::cmd("ZRANGE")
        .arg("bull:q:delayed")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert_eq!(delayed, [id.clone()]);
    // Paused: getTargetQueueList (included) sends the job to the paused list.
    redis::cmd("SET")
        .arg("bull:q:meta-paused")
        .arg(1)
        .exec(&mut conn)
        .unwrap();
    let promoted = promote(
        "bull:q:delayed",
        "bull:q:wait",
        "bull:q:paused",
        "bull:q:meta-paused",
        "bull:q:priority",
        Q,
        &id,
        "t1",
    )
    .invoke(&mut conn)
    .unwrap();
    assert_eq!(promoted, 0);
    let paused: Vec<String> = redis::cmd("LRANGE")
        .arg("bull:q:paused")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert_eq!(paused, [id]);
    // Not delayed any more: a second promote says so.
    let again = promote(
        "bull:q:delayed",
        "bull:q:wait",
        "bull:q:paused",
        "bull:q:meta-paused",
        "bull:q:priority",
        Q,
        "1",
        "t1",
    )
    .invoke(&mut conn)
    .unwrap();
    assert_eq!(again, -1);
    // The server holds the expanded body under the digest the macro computed.
    let call = promote("d", "w", "p", "m", "pr", Q, "1", "t1");
    let script = call.script();
    assert!(!script.source().contains("@include"));
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(script.sha1())
        .query(&mut conn)
        .unwrap();
    assert_eq!(exists, [true]);
}

#[lockscript_test::test]
fn an_error_in_an_included_file_names_that_file_and_its_own_line(conn: &mut redis::Connection) {
    let id = add(conn, 1_700_000_060_000, 5);
    // The priority set is a string: ZADD in the included addJobWithPriority fails.
    redis::cmd("SET")
        .arg("bull:q:priority")
        .arg("not a sorted set")
        .exec(conn)
        .unwrap();
    let err = promote(
        "bull:q:delayed",
        "bull:q:wait",
        "bull:q:paused",
        "bull:q:meta-paused",
        "bull:q:priority",
        Q,
        &id,
        "t1",
    )
    .invoke(conn)
    .unwrap_err();
    let LockError::Script { at, message, .. } = &err else {
        panic!("expected a script error, got {err:?}");
    };
    assert!(message.contains("WRONGTYPE"), "{message}");
    assert_eq!(
        at.as_deref(),
        Some("../../target/corpus/bull-4.16.5/package/lib/commands/includes/addJobWithPriority.lua:6")
    );
    assert!(
        err.to_string().contains("includes/addJobWithPriority.lua:6: "),
        "{err}"
    );
}
