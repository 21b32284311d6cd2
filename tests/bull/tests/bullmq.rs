//! BullMQ's scripts, declared with the types BullMQ's own callers read, run under a real,
//! private server: each reply converts to its declared type on every path taken here.

use std::collections::HashMap;

use bull_scripts::bullmq::{
    add_standard_job, get_counts, get_job_scheduler, get_metrics, get_state_v2, is_finished,
    is_maxed, move_to_active, move_to_finished, paginate,
};
use redis::{FromRedisValue, Value};

const Q: &str = "bull:q:";
const NOW: &str = "1700000000000";

/// A value as BullMQ's `msgpackr` sends it in `ARGV` (the scripts read it with
/// `cmsgpack.unpack`).
enum Pack<'a> {
    Nil,
    Int(i64),
    Str(&'a str),
    Bool(bool),
    Array(Vec<Pack<'a>>),
    Map(Vec<(&'a str, Pack<'a>)>),
}

impl Pack<'_> {
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Self::Nil => out.push(0xc0),
            Self::Bool(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
            Self::Int(n @ 0..=127) => out.push(*n as u8),
            Self::Int(n) => {
                out.push(0xd3);
                out.extend_from_slice(&n.to_be_bytes());
            }
            Self::Str(s) => {
                match s.len() {
                    n @ 0..32 => out.push(0xa0 | n as u8),
                    n @ 32..256 => out.extend_from_slice(&[0xd9, n as u8]),
                    n => {
                        out.push(0xda);
                        out.extend_from_slice(&(n as u16).to_be_bytes());
                    }
                }
                out.extend_from_slice(s.as_bytes());
            }
            Self::Array(items) => {
                assert!(items.len() < 16);
                out.push(0x90 | items.len() as u8);
                items.iter().for_each(|i| i.write(out));
            }
            Self::Map(entries) => {
                assert!(entries.len() < 16);
                out.push(0x80 | entries.len() as u8);
                for (k, v) in entries {
                    Self::Str(k).write(out);
                    v.write(out);
                }
            }
        }
    }
}

fn key(name: &str) -> String {
    format!("{Q}{name}")
}

/// `Scripts.addJob` for a job without delay or priority: `addStandardJob`, with the job's
/// parent key when it has one.
fn add(conn: &mut redis::Connection, parent: Option<&str>) -> String {
    let args = Pack::Array(vec![
        Pack::Str(Q),
        Pack::Str(""),
        Pack::Str("email"),
        Pack::Int(1_700_000_000_000),
        parent.map_or(Pack::Nil, Pack::Str),
        Pack::Nil,
        Pack::Nil,
        Pack::Nil,
        Pack::Nil,
        Pack::Nil,
    ]);
    let opts = Pack::Map(vec![("attempts", Pack::Int(1))]);
    add_standard_job(
        &key("wait"),
        &key("paused"),
        &key("meta"),
        &key("id"),
        &key("completed"),
        &key("delayed"),
        &key("active"),
        &key("events"),
        &key("marker"),
        &args.bytes(),
        "{\"to\":\"a@b\"}",
        &opts.bytes(),
    )
    .invoke(conn)
    .expect("addStandardJob runs and its reply reads as a String")
}

/// The worker's options as `Scripts.moveToActive` and `moveToFinished` pack them.
fn worker_opts() -> Vec<u8> {
    Pack::Map(vec![
        ("token", Pack::Str("t1")),
        ("lockDuration", Pack::Int(30_000)),
        ("name", Pack::Str("w1")),
        ("keepJobs", Pack::Map(vec![("count", Pack::Int(-1))])),
        ("attempts", Pack::Int(1)),
        ("maxMetricsSize", Pack::Str("")),
        ("fpof", Pack::Bool(false)),
    ])
    .bytes()
}

fn take(conn: &mut redis::Connection) -> (Value, String, i64, i64) {
    move_to_active(
        &key("wait"),
        &key("active"),
        &key("prioritized"),
        &key("events"),
        &key("stalled"),
        &key("limiter"),
        &key("delayed"),
        &key("paused"),
        &key("meta"),
        &key("pc"),
        &key("marker"),
        Q,
        NOW,
        &worker_opts(),
    )
    .invoke(conn)
    .expect("moveToActive runs and its reply reads as (Value, String, i64, i64)")
}

fn complete(conn: &mut redis::Connection, id: &str, fetch_next: bool) -> Value {
    move_to_finished(
        &key("wait"),
        &key("active"),
        &key("prioritized"),
        &key("events"),
        &key("stalled"),
        &key("limiter"),
        &key("delayed"),
        &key("paused"),
        &key("meta"),
        &key("pc"),
        &key("completed"),
        &key(id),
        &key("metrics:completed"),
        &key("marker"),
        id,
        NOW,
        "returnvalue",
        "\"done\"",
        "completed",
        if fetch_next { "1" } else { "0" },
        Q,
        &worker_opts(),
        b"",
    )
    .invoke(conn)
    .expect("moveToFinished runs")
}

fn state(conn: &mut redis::Connection, id: &str) -> String {
    get_state_v2(
        &key("completed"),
        &key("failed"),
        &key("delayed"),
        &key("active"),
        &key("wait"),
        &key("paused"),
        &key("waiting-children"),
        &key("prioritized"),
        id,
    )
    .invoke(conn)
    .expect("getStateV2 runs and its reply reads as a String")
}

#[lockscript_test::test]
fn add_standard_job_replies_the_new_id_as_text_and_a_missing_parent_as_its_code(
    conn: &mut redis::Connection,
) {
    assert_eq!(add(conn, None), "1");
    assert_eq!(add(conn, None), "2");
    // The integer -5 (ParentJobNotExist), which BullMQ's `string | number` and `String` read.
    assert_eq!(add(conn, Some("bull:q:nope")), "-5");
    let counts = get_counts(Q, &["wait", "active", "completed", "delayed"])
        .invoke(conn)
        .unwrap();
    assert_eq!(counts, [2, 0, 0, 0]);
    assert_eq!(state(conn, "1"), "waiting");
    assert_eq!(state(conn, "9"), "unknown");
}

#[lockscript_test::test]
fn move_to_active_replies_the_job_or_zeros_in_the_tuple_declared(conn: &mut redis::Connection) {
    add(conn, None);
    let (job, id, rate_limit_delay, next_delayed) = take(conn);
    assert_eq!((id.as_str(), rate_limit_delay, next_delayed), ("1", 0, 0));
    let job = HashMap::<String, String>::from_redis_value(job).expect("the job's HGETALL");
    assert_eq!(job["name"], "email");
    assert_eq!(job["pb"], "w1");
    assert_eq!(state(conn, "1"), "active");
    // Nothing waits: the job is the integer 0, and so is its id, read as "0".
    assert_eq!(take(conn), (Value::Int(0), "0".to_owned(), 0, 0));
    assert!(!is_maxed(&key("meta"), &key("active")).invoke(conn).unwrap());
}

#[lockscript_test::test]
fn move_to_finished_replies_the_next_job_or_a_code_each_as_bullmq_reads_it(
    conn: &mut redis::Connection,
) {
    add(conn, None);
    add(conn, None);
    assert_eq!(take(conn).1, "1");
    // Completing job 1 takes job 2 in the same call: the tuple `move_to_active` replies.
    let next = complete(conn, "1", true);
    let (job, id, _, _) =
        <(HashMap<String, String>, String, i64, i64)>::from_redis_value(next).unwrap();
    assert_eq!((job["name"].as_str(), id.as_str()), ("email", "2"));
    assert_eq!(state(conn, "1"), "completed");
    // Without the next job: 0.
    assert_eq!(complete(conn, "2", false), Value::Int(0));
    // Not active any more: a negative code (-3, JobNotInState... or -2, the lock gone).
    let again = i64::from_redis_value(complete(conn, "2", false)).unwrap();
    assert!(again < 0, "{again}");

    // `isFinished`: the code alone, or with the return value when asked.
    let finished = |conn: &mut redis::Connection, id: &str, with_value: &str| {
        is_finished(&key("completed"), &key("failed"), &key(id), id, with_value)
            .invoke(conn)
            .unwrap()
    };
    assert_eq!(finished(conn, "1", ""), Value::Int(1));
    let (code, value) = <(i64, String)>::from_redis_value(finished(conn, "1", "1")).unwrap();
    assert_eq!((code, value.as_str()), (1, "\"done\""));
    assert_eq!(finished(conn, "9", ""), Value::Int(-1));
}

#[lockscript_test::test]
fn reads_of_what_is_missing_reply_nil_fields_and_short_arrays(conn: &mut redis::Connection) {
    // `HMGET` of metrics never collected: nil for each field, read as `None`.
    let metrics = get_metrics(
        &key("metrics:completed"),
        &key("metrics:completed:data"),
        "0",
        "-1",
    )
    .invoke(conn)
    .unwrap();
    assert_eq!(metrics, (vec![None, None, None], vec![], 0));
    // `{nil, nil}`: an empty array, which only a `Vec` reads (a tuple needs two elements).
    let scheduler = get_job_scheduler(&key("repeat"), "nightly")
        .invoke(conn)
        .unwrap();
    assert!(scheduler.is_empty());
    // A missing key: four elements; a set: five.
    let page = |conn: &mut redis::Connection| {
        paginate(&key("tags"), "0", "-1", "0", "0", "5", "")
            .invoke(conn)
            .unwrap()
    };
    assert_eq!(page(conn).len(), 4);
    redis::cmd("SADD")
        .arg(key("tags"))
        .arg("a")
        .exec(conn)
        .unwrap();
    let five = page(conn);
    assert_eq!(five.len(), 5);
    assert_eq!(
        Vec::<String>::from_redis_value(five[2].clone()).unwrap(),
        ["a"]
    );
}
