//! What the lock runtime tells operators: tracing events for acquire, wait, renew,
//! release and loss, and never an owner token in them.
//!
//! Alone in its test binary: tracing caches per-callsite interest process-wide, and a
//! test running beside this one without a subscriber could hide events from it.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockscript::Locks;
use lockscript_test::server::RedisServer;
use redis::AsyncCommands;

/// Collects everything the fmt subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

// Current-thread runtime: the subscriber is set for this thread, and every task
// (monitors, notifier) runs on it.
#[tokio::test]
async fn events_cover_the_lock_life_and_never_show_a_token() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(captured.clone())
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let server = RedisServer::start();
    let locks = Locks::connect(&server.client())
        .await
        .unwrap()
        .ttl(Duration::from_millis(90));
    let mut conn = server.multiplexed().await;
    let mut tokens = Vec::new();

    let held = locks.lock("audit").await.unwrap();
    tokens.push(conn.get::<_, String>("lock:{audit}").await.unwrap());
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("audit").await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(120)).await; // renewals happen meanwhile
    held.release().await.unwrap();
    let second = waiter.await.unwrap();
    tokens.push(conn.get::<_, String>("lock:{audit}").await.unwrap());
    let _: () = conn.del("lock:{audit}").await.unwrap();
    second.lost().await;

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    for needle in [
        "lock.acquire",
        "lock acquired",
        "waiting",
        "lease renewed",
        "lock released",
        "lock lost",
    ] {
        assert!(log.contains(needle), "no `{needle}` event in:\n{log}");
    }
    for token in &tokens {
        assert_eq!(token.len(), 32);
        assert!(
            !log.contains(token.as_str()),
            "a token leaked into the log:\n{log}"
        );
    }
}

#[tokio::test]
async fn connecting_to_a_server_that_may_evict_keys_warns_why() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(captured.clone())
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let safe = RedisServer::start();
    Locks::connect(&safe.client()).await.unwrap();
    assert!(
        captured.0.lock().unwrap().is_empty(),
        "noeviction: no warning"
    );

    let evicting = RedisServer::builder()
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .start();
    Locks::connect(&evicting.client()).await.unwrap();
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(log.contains("maxmemory-policy is allkeys-lru"), "{log}");
    assert!(
        log.contains("set maxmemory-policy noeviction"),
        "says what to do: {log}"
    );
}
