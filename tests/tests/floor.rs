//! The oldest server a script runs on: `load_scripts` and a script's first call on a
//! server (its `NOSCRIPT`) refuse an older one, naming the script, the command and both
//! versions, before loading anything. (Its own test binary:
//! every `load_scripts` of a binary that registers this script needs such a server.)

use lockscript::{LockError, lock_script};
use lockscript_test::server::RedisServer;

/// Takes one field of a hash; HGETDEL needs Redis 8.0 or Valkey 9.1.
#[lock_script("lua/hgetdel.lua", requires = "redis 8.0, valkey 9.1")]
fn take(#[key] hash: &str, field: &str) -> Option<String>;

#[test]
fn load_scripts_refuses_a_server_older_than_a_script_needs() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    let (product, version) = match field("valkey_version") {
        Some(v) => ("Valkey", v),
        None => ("Redis", field("redis_version").unwrap()),
    };
    let major: u32 = version.split('.').next().unwrap().parse().unwrap();
    assert_eq!(
        take("h", "f").script().floor(),
        [
            ("Redis", "8.0.0", "`HGETDEL`"),
            ("Valkey", "9.1.0", "`HGETDEL`")
        ]
    );
    if product == "Redis" && major < 8 {
        let err = lockscript::load_scripts(&mut conn).unwrap_err();
        let LockError::ServerTooOld {
            script,
            needs,
            server: named,
        } = &err
        else {
            panic!("expected ServerTooOld, got {err:?}");
        };
        assert_eq!(*script, "hgetdel");
        assert_eq!(needs, "Redis 8.0.0 or later (for `HGETDEL`)");
        assert_eq!(named, &format!("Redis {version}"));
        assert_eq!(
            err.to_string(),
            format!(
                "script `hgetdel` needs Redis 8.0.0 or later (for `HGETDEL`), but the server is \
                 Redis {version}: run it on a newer server, or change the script"
            )
        );
        // Nothing was loaded.
        let sha1 = take("h", "f").script().sha1();
        let exists: Vec<bool> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(sha1)
            .query(&mut conn)
            .unwrap();
        assert_eq!(exists, [false]);
        // The script's first call on the server says the same, instead of the server's
        // "unknown command" from inside the script.
        let err = take("h", "f").invoke(&mut conn).unwrap_err();
        assert!(
            matches!(
                &err,
                LockError::ServerTooOld {
                    script: "hgetdel",
                    ..
                }
            ),
            "{err:?}"
        );
    } else {
        assert!(lockscript::load_scripts(&mut conn).unwrap() > 0);
        redis::cmd("HSET")
            .arg("h")
            .arg("f")
            .arg("v")
            .exec(&mut conn)
            .unwrap();
        assert_eq!(
            take("h", "f").invoke(&mut conn).unwrap().as_deref(),
            Some("v")
        );
        assert_eq!(take("h", "f").invoke(&mut conn).unwrap(), None);
    }
}

/// The product and version of the server the harness runs.
fn this_server() -> (&'static str, String) {
    let server = RedisServer::start();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut server.connection())
        .unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    match field("valkey_version") {
        Some(v) => ("Valkey", v),
        None => ("Redis", field("redis_version").unwrap()),
    }
}

/// On a Cluster, `INFO server` answers one entry per primary: each is checked, and the
/// oldest counts. A server too old is refused by `load_scripts` and by the script's first
/// call (sync and async cluster connections, scripts and Functions), naming the version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_every_primary_is_held_to_the_floor() {
    let (product, version) = this_server();
    let major: u32 = version.split('.').next().unwrap().parse().unwrap();
    let too_old = product == "Redis" && major < 8;
    let cluster = lockscript_test::cluster::RedisCluster::start(3, 0);
    let is_too_old = |e: &LockError| {
        matches!(e, LockError::ServerTooOld { script: "hgetdel", needs, server }
            if needs == "Redis 8.0.0 or later (for `HGETDEL`)" && *server == format!("Redis {version}"))
    };
    let mut sync = cluster.connection();
    let mut conn = cluster.async_connection().await;
    if too_old {
        let err = lockscript::load_scripts(&mut sync).unwrap_err();
        assert!(is_too_old(&err), "{err:?}");
        let err = lockscript::load_scripts_async(&mut conn).await.unwrap_err();
        assert!(is_too_old(&err), "{err:?}");
        let err = take("h", "f").invoke(&mut sync).unwrap_err();
        assert!(is_too_old(&err), "{err:?}");
        let err = take("h", "f").invoke_async(&mut conn).await.unwrap_err();
        assert!(is_too_old(&err), "{err:?}");
        if lockscript_test::has_functions(&mut cluster.node(0).connection()) {
            let by_functions = take("h", "f").delivery(lockscript::Delivery::Functions);
            let err = by_functions.invoke(&mut sync).unwrap_err();
            assert!(is_too_old(&err), "{err:?}");
            let err = by_functions.invoke_async(&mut conn).await.unwrap_err();
            assert!(is_too_old(&err), "{err:?}");
        }
    } else {
        assert_eq!(
            lockscript::load_scripts_async(&mut conn).await.unwrap(),
            lockscript::scripts().len()
        );
        redis::cmd("HSET")
            .arg("h")
            .arg("f")
            .arg("v")
            .exec(&mut sync)
            .unwrap();
        assert_eq!(
            take("h", "f")
                .invoke_async(&mut conn)
                .await
                .unwrap()
                .as_deref(),
            Some("v")
        );
        assert_eq!(take("h", "f").invoke(&mut sync).unwrap(), None);
    }
}
