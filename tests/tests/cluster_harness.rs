//! The Redis Cluster harness itself: a cluster serves reads and writes through both
//! cluster connections, `master_for_key` agrees with the servers, a stopped or frozen
//! master is replaced by its replica and comes back as a replica, and dropping the
//! cluster kills every node.
//!
//! Each cluster start costs about 2 s (a Redis master reports `cluster_state:ok` no sooner
//! than 2 s after it started), so the checks share clusters where they can.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use lockscript_test::cluster::{RedisCluster, key_slot};
use redis::{AsyncCommands, Commands, Value};

/// A liveness bound for failover and restarts, never a speed assertion.
const PATIENCE: Duration = Duration::from_secs(30);

/// The `(start, end, master port)` ranges of `CLUSTER SLOTS` as node `i` reports them.
fn cluster_slots(cluster: &RedisCluster, i: usize) -> Vec<(u16, u16, u16)> {
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut cluster.node(i).connection())
        .expect("CLUSTER SLOTS");
    let Value::Array(ranges) = reply else {
        panic!("CLUSTER SLOTS: {reply:?}")
    };
    ranges
        .into_iter()
        .map(|range| {
            let Value::Array(range) = range else {
                panic!("a slot range: {range:?}")
            };
            let int = |v: &Value| match v {
                Value::Int(n) => u16::try_from(*n).expect("a u16"),
                other => panic!("an integer: {other:?}"),
            };
            let Value::Array(master) = &range[2] else {
                panic!("a master: {range:?}")
            };
            (int(&range[0]), int(&range[1]), int(&master[1]))
        })
        .collect()
}

/// Two keys whose hash tags put them on different masters, with their masters.
fn keys_on_two_masters(cluster: &RedisCluster) -> [(String, usize); 2] {
    let first = ("{a}k".to_owned(), cluster.master_for_key("{a}k"));
    for tag in b'b'..=b'z' {
        let key = format!("{{{}}}k", char::from(tag));
        let master = cluster.master_for_key(&key);
        if master != first.1 {
            return [first, (key, master)];
        }
    }
    panic!("every tag a..z landed on node {}", first.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_masters_serve_both_connections_agree_on_key_owners_and_die_on_drop() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 0);
    eprintln!("3-master cluster ready in {:?}", started.elapsed());

    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.masters(), vec![0, 1, 2]);
    assert!(cluster.replicas().is_empty());

    let keys = keys_on_two_masters(&cluster);
    for (key, master) in &keys {
        // Our CRC16 agrees with the server's.
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut cluster.node(0).connection())
            .unwrap();
        assert_eq!(slot, key_slot(key), "{key}");
        // The master's own CLUSTER SLOTS puts the slot in a range it serves.
        let port = cluster.node(*master).port();
        let ranges = cluster_slots(&cluster, *master);
        assert!(
            ranges
                .iter()
                .any(|&(lo, hi, p)| (lo..=hi).contains(&slot) && p == port),
            "slot {slot} of {key} is not served by node {master} (port {port}): {ranges:?}"
        );
    }

    // Async: write both keys, read them back.
    let mut con = cluster.async_connection().await;
    for (key, _) in &keys {
        let () = con.set(key, format!("async {key}")).await.unwrap();
    }
    for (key, _) in &keys {
        let got: String = con.get(key).await.unwrap();
        assert_eq!(got, format!("async {key}"));
    }

    // Sync: read what async wrote, overwrite, read back.
    let mut sync = cluster.connection();
    for (key, _) in &keys {
        let got: String = sync.get(key).unwrap();
        assert_eq!(got, format!("async {key}"));
        let () = sync.set(key, format!("sync {key}")).unwrap();
        let got: String = sync.get(key).unwrap();
        assert_eq!(got, format!("sync {key}"));
    }

    // Each key lives on the node master_for_key names, and only there.
    for (key, master) in &keys {
        for i in 0..cluster.nodes().len() {
            let reply: redis::RedisResult<String> = cluster.node(i).connection().get(key);
            if i == *master {
                assert_eq!(reply.unwrap(), format!("sync {key}"));
            } else {
                let err = reply.unwrap_err();
                assert_eq!(err.code(), Some("MOVED"), "node {i} for {key}: {err}");
            }
        }
    }

    // Dropping the cluster kills every node: client and bus ports refuse connections.
    // (Part of this test to spare CI a cluster start.)
    let ports: Vec<u16> = cluster
        .nodes()
        .iter()
        .flat_map(|node| [node.port(), node.port() + 10000])
        .collect();
    for &port in &ports {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        TcpStream::connect_timeout(&addr, Duration::from_secs(1))
            .unwrap_or_else(|e| panic!("port {port} should be open: {e}"));
    }
    drop(cluster);
    for port in ports {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let err = TcpStream::connect_timeout(&addr, Duration::from_secs(1))
            .expect_err("the node should be gone");
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::ConnectionRefused,
            "port {port}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_master_is_replaced_by_its_replica() {
    let started = Instant::now();
    let mut cluster = RedisCluster::start(3, 1);
    eprintln!("3+3 cluster ready in {:?}", started.elapsed());

    assert_eq!(cluster.nodes().len(), 6);
    assert_eq!(cluster.masters().len(), 3);
    let replicas = cluster.replicas();
    assert_eq!(replicas.len(), 3);

    let mut con = cluster.async_connection().await;
    let () = con.set("x", "before").await.unwrap();
    // The write has reached the replica before its master goes. WAIT must go on the
    // connection that wrote (a fresh connection has nothing to wait for and returns at
    // once); the cluster connection sends it to every master over the same per-node
    // connections as the SET and returns the minimum count.
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(acked, 1);
    let old_master = cluster.master_for_key("x");

    cluster.node_mut(old_master).stop();
    let stopped = Instant::now();
    cluster.wait_until_ok(PATIENCE);
    let failover = stopped.elapsed();
    eprintln!("failover took {failover:?}");

    let new_master = cluster.master_for_key("x");
    assert_ne!(new_master, old_master);
    assert!(
        replicas.contains(&new_master),
        "{new_master} not in {replicas:?}"
    );
    assert_eq!(cluster.masters().len(), 3);
    assert!(!cluster.masters().contains(&old_master));

    let mut fresh = cluster.async_connection().await;
    let got: String = fresh.get("x").await.unwrap();
    assert_eq!(got, "before");
    let () = fresh.set("x", "after").await.unwrap();
    let got: String = fresh.get("x").await.unwrap();
    assert_eq!(got, "after");

    // The connection opened before the failover finds the new master too.
    let got: String = con.get("x").await.unwrap();
    assert_eq!(got, "after");

    // The old master comes back as a replica of the node that replaced it.
    let restarted = Instant::now();
    cluster.node_mut(old_master).restart();
    cluster.wait_until_ok(PATIENCE);
    eprintln!("old master rejoined in {:?}", restarted.elapsed());
    assert!(cluster.replicas().contains(&old_master));
    assert_eq!(cluster.master_for_key("x"), new_master);
}

#[test]
fn a_frozen_master_is_replaced_and_rejoins_as_a_replica_when_resumed() {
    let cluster = RedisCluster::start(3, 1);
    let master = cluster.master_for_key("f");

    cluster.node(master).signal("STOP");
    let frozen = Instant::now();
    cluster.wait_until_ok(PATIENCE);
    eprintln!("failover from a frozen master took {:?}", frozen.elapsed());
    let successor = cluster.master_for_key("f");
    assert_ne!(successor, master);
    // A node that does not answer is not counted.
    assert!(!cluster.masters().contains(&master));
    assert!(!cluster.replicas().contains(&master));

    cluster.node(master).signal("CONT");
    let resumed = Instant::now();
    cluster.wait_until_ok(PATIENCE);
    eprintln!("resumed master rejoined in {:?}", resumed.elapsed());
    assert!(cluster.replicas().contains(&master));
    assert_eq!(cluster.master_for_key("f"), successor);
}
