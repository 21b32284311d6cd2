//! A variadic `#[key]` slice sends as many KEYS as it writes: the count the server gets
//! is the number of keys actually written, whatever the element type (`Option`s that
//! write nothing, pairs that write two), so every argument after them arrives as ARGV.
//! Checked against a real server by a script that answers what arrived.

use lockscript::lock_script;
use lockscript_test::server::RedisServer;
use redis::ToRedisArgs;

/// Answers `{#KEYS, #ARGV, KEYS..., ARGV...}`.
#[lock_script("lua/echo.lua")]
fn echo<K: ToRedisArgs, A: ToRedisArgs>(#[key] keys: &[K], args: &[A]) -> Vec<String>;

/// What the server received: (KEYS, ARGV).
fn arrived(reply: &[String]) -> (Vec<&str>, Vec<&str>) {
    let keys: usize = reply[0].parse().unwrap();
    let args: usize = reply[1].parse().unwrap();
    assert_eq!(reply.len(), 2 + keys + args, "{reply:?}");
    let rest: Vec<&str> = reply[2..].iter().map(String::as_str).collect();
    (rest[..keys].to_vec(), rest[keys..].to_vec())
}

#[test]
fn a_slice_of_options_sends_as_keys_only_the_ones_written() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let reply = echo(&[Some("a"), None, Some("b")], &["x"])
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(arrived(&reply), (vec!["a", "b"], vec!["x"]));
    let reply = echo::<Option<&str>, &str>(&[None, None], &["x", "y"])
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(arrived(&reply), (vec![], vec!["x", "y"]));
}

#[test]
fn a_slice_of_pairs_sends_both_halves_as_keys() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let reply = echo(&[("a", "b"), ("c", "d")], &["x"])
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(arrived(&reply), (vec!["a", "b", "c", "d"], vec!["x"]));
    let reply = echo(&[("a", "b")], &["x"]).invoke(&mut conn).unwrap();
    assert_eq!(arrived(&reply), (vec!["a", "b"], vec!["x"]));
}

/// The same count on the async path and in a pipeline (both send the same command).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_path_and_a_pipeline_send_the_same_count() {
    use lockscript::PipelineExt;
    let server = RedisServer::start();
    let mut conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let reply = echo(&[Some("a"), None, Some("b")], &["x"])
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(arrived(&reply), (vec!["a", "b"], vec!["x"]));

    let call = echo(&[("a", "b"), ("c", "d")], &["x"]);
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.invoke(&call).unwrap().invoke(&call).unwrap();
    let replies: Vec<redis::Value> = pipe.query_async(&mut conn).await.unwrap();
    assert_eq!(replies.len(), 2);
    for reply in replies {
        let reply = call.read(reply).unwrap();
        assert_eq!(arrived(&reply), (vec!["a", "b", "c", "d"], vec!["x"]));
    }
}
