//! bull's scripts with includes, run under a real, private Redis: each reply converts to
//! the type declared (the one bull's own callers read) on every path taken here.

use bull_scripts::bull::{
    add_job, is_finished, is_job_in_list, move_stalled_jobs_to_wait, move_to_active,
    move_to_finished, promote, remove_jobs, take_lock, update_delay_set,
};
use lockscript::LockError;
use lockscript_test::TestRedis;
use redis::{FromRedisValue, Value};

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
fn a_prioritised_job_goes_through_the_included_add_job_with_priority(conn: &mut redis::Connection) {
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
    assert_eq!(delayed, std::slice::from_ref(&id));
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
        Some(
            "../../target/corpus/bull-4.16.5/package/lib/commands/includes/addJobWithPriority.lua:6"
        )
    );
    assert!(
        err.to_string()
            .contains("includes/addJobWithPriority.lua:6: "),
        "{err}"
    );
}

fn key(name: &str) -> String {
    format!("{Q}{name}")
}

/// `scripts.moveToActive` without a rate limiter: the next waiting job, locked.
fn take(
    conn: &mut redis::Connection,
) -> Option<(std::collections::HashMap<String, String>, String)> {
    move_to_active(
        &key("wait"),
        &key("active"),
        &key("priority"),
        &key("active@t1"),
        &key("stalled"),
        &key("limiter"),
        &key("delayed"),
        &key("drained"),
        Q,
        "t1",
        "30000",
        "1700000000000",
        "",
        "",
        "",
        "",
        "",
    )
    .invoke(conn)
    .expect("moveToActive runs and its reply reads as Option<(HashMap, String)>")
}

/// `scripts.moveToCompleted`: keep every job, and take the next one when `fetch_next`.
fn complete(conn: &mut redis::Connection, id: &str, fetch_next: bool) -> Value {
    // `{ count: -1 }` packed as bull's msgpackr sends it.
    let keep_all = [0x81, 0xa5, b'c', b'o', b'u', b'n', b't', 0xff];
    move_to_finished(
        &key("active"),
        &key("completed"),
        &key(id),
        &key("wait"),
        &key("priority"),
        &key("active@t1"),
        &key("delayed"),
        &key("stalled"),
        &key("metrics:completed"),
        id,
        "1700000000001",
        "returnvalue",
        "\"done\"",
        "t1",
        &keep_all,
        "{}",
        if fetch_next { "1" } else { "0" },
        Q,
        "30000",
        "t1",
        "",
    )
    .invoke(conn)
    .expect("moveToFinished runs")
}

#[lockscript_test::test]
fn move_to_active_and_finished_reply_the_job_nil_or_a_code_as_bull_reads_them(
    conn: &mut redis::Connection,
) {
    add(conn, 0, 0);
    add(conn, 0, 0);
    let (job, id) = take(conn).expect("job 1 waits");
    assert_eq!((job["name"].as_str(), id.as_str()), ("email", "1"));
    assert!(
        take_lock(&key("1:lock"), "t2", "30000")
            .invoke(conn)
            .is_ok_and(|taken| !taken)
    );
    assert!(is_job_in_list(&key("active"), "1").invoke(conn).unwrap());
    assert!(!is_job_in_list(&key("wait"), "1").invoke(conn).unwrap());
    assert_eq!(
        is_finished(&key("completed"), &key("failed"), "1")
            .invoke(conn)
            .unwrap(),
        None
    );
    // Completing job 1 takes job 2: `[fields, id]`, read as `move_to_active` reads it.
    let next = complete(conn, "1", true);
    let (job, id) =
        <(std::collections::HashMap<String, String>, String)>::from_redis_value(next).unwrap();
    assert_eq!((job["name"].as_str(), id.as_str()), ("email", "2"));
    assert_eq!(
        is_finished(&key("completed"), &key("failed"), "1")
            .invoke(conn)
            .unwrap(),
        Some(1)
    );
    // Without the next job: 0; then job 2 is no longer active, or its lock is gone: < 0.
    assert_eq!(complete(conn, "2", false), Value::Int(0));
    let again = i64::from_redis_value(complete(conn, "2", false)).unwrap();
    assert!(again < 0, "{again}");
    // Nothing waits: nil, `None`.
    assert_eq!(take(conn), None);
}

#[lockscript_test::test]
fn stalled_jobs_and_the_delay_set_reply_lists_and_an_optional_score(conn: &mut redis::Connection) {
    let stalled = |conn: &mut redis::Connection| {
        move_stalled_jobs_to_wait(
            &key("stalled"),
            &key("wait"),
            &key("active"),
            &key("failed"),
            &key("stalled-check"),
            &key("meta-paused"),
            &key("paused"),
            "1",
            Q,
            "1700000000000",
            "5000",
        )
        .invoke(conn)
        .expect("moveStalledJobsToWait runs and its reply reads as two lists")
    };
    add(conn, 0, 0);
    take(conn).expect("job 1 waits");
    // Active without its lock: the first check marks it, the second moves it back.
    redis::cmd("DEL").arg(key("1:lock")).exec(conn).unwrap();
    assert_eq!(stalled(conn), (vec![], vec![]));
    redis::cmd("DEL")
        .arg(key("stalled-check"))
        .exec(conn)
        .unwrap();
    assert_eq!(stalled(conn), (vec![], vec!["1".to_owned()]));
    // Checked too recently: `{{}, {}}`.
    assert_eq!(stalled(conn), (vec![], vec![]));

    let update = |conn: &mut redis::Connection, now: &str| {
        update_delay_set(
            &key("delayed"),
            &key("active"),
            &key("wait"),
            &key("priority"),
            &key("paused"),
            &key("meta-paused"),
            Q,
            now,
            "t1",
        )
        .invoke(conn)
        .expect("updateDelaySet runs and its reply reads as Option<f64>")
    };
    assert_eq!(update(conn, "1700000000000"), None);
    // A job delayed a minute: its score (the time * 4096 + its id) is the next time.
    let id = add(conn, 1_700_000_060_000, 0);
    assert_eq!(id, "2");
    assert_eq!(
        update(conn, "1700000000000"),
        Some(1_700_000_060_000.0 * 4096.0 + 2.0)
    );

    // `removeJobs`: the next cursor and the ids removed (both jobs are unlocked now).
    let (mut cursor, mut removed) = ("0".to_owned(), Vec::new());
    loop {
        let (next, ids) = remove_jobs(
            &key("active"),
            &key("wait"),
            &key("delayed"),
            &key("paused"),
            &key("completed"),
            &key("failed"),
            &key("priority"),
            &key("limiter"),
            Q,
            "*",
            &cursor,
        )
        .invoke(conn)
        .expect("removeJobs runs and its reply reads as (String, Vec<String>)");
        removed.extend(ids);
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    removed.sort();
    assert_eq!(removed, ["1", "2"]);
}
