//! The lock cycle over TLS (`rediss://`) against a redis-server with a TLS port and
//! certificates made by openssl for the test; a client that trusts another CA is
//! refused.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lockscript::{Locks, RetryPolicy};
use lockscript_test::server::{RedisServer, free_port};
use redis::TlsCertificates;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl on PATH: apt-get install -y openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Certificates live two days: long enough for any test run.
const DAYS: &str = "2";

/// A self-signed CA: `<name>.key` and `<name>.crt` with subject `/CN=<cn>`.
fn self_signed_ca(dir: &Path, name: &str, cn: &str) {
    let (key, crt, subject) = (
        format!("{name}.key"),
        format!("{name}.crt"),
        format!("/CN={cn}"),
    );
    openssl(
        dir,
        &[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &crt,
            "-subj", &subject, "-days", DAYS,
        ],
    );
}

/// A CA, a server certificate it signs for 127.0.0.1, and an unrelated CA.
fn make_certificates(dir: &Path) {
    self_signed_ca(dir, "ca", "lockscript test CA");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(dir.join("san.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-extfile",
            "san.cnf",
            "-days",
            DAYS,
        ],
    );
    self_signed_ca(dir, "other", "another CA");
}

fn tls_client(port: u16, ca: &Path) -> redis::Client {
    redis::Client::build_with_tls(
        format!("rediss://127.0.0.1:{port}/"),
        TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(ca).unwrap()),
        },
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_cycle_works_over_tls_and_a_wrong_ca_is_refused() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs = tempfile::tempdir().unwrap();
    make_certificates(certs.path());
    let file = |name: &str| certs.path().join(name).to_string_lossy().into_owned();
    let tls_port = free_port();
    let builder = RedisServer::builder()
        .arg("--tls-port")
        .arg(tls_port.to_string())
        .arg("--tls-cert-file")
        .arg(file("server.crt"))
        .arg("--tls-key-file")
        .arg(file("server.key"))
        .arg("--tls-ca-cert-file")
        .arg(file("ca.crt"))
        .arg("--tls-auth-clients")
        .arg("no");
    // A server built without TLS (BUILD_TLS=no, or TLS as a module that is not loaded)
    // exits at startup with "Failed finding TLS support": nothing to test there. Only a
    // server chosen with REDIS_SERVER_BIN may lack it (the registry builds of Redis 8.2
    // and Valkey 9.1 do); the default one must have it.
    let server = match std::panic::catch_unwind(|| builder.start()) {
        Ok(server) => server,
        Err(panic) => {
            let text = panic.downcast_ref::<String>().map_or("", String::as_str);
            if text.contains("Failed finding TLS support")
                && std::env::var_os("REDIS_SERVER_BIN").is_some()
            {
                eprintln!("skipped: this redis-server has no TLS support");
                return;
            }
            std::panic::resume_unwind(panic);
        }
    };

    let client = tls_client(tls_port, &certs.path().join("ca.crt"));
    // A 60 s lease and a 30 s backoff: only the release notification, over its own TLS
    // connection, can wake the waiter, which uses a handle of its own (a release hands
    // the lock over only to waiters of the releasing handle).
    let connect = || async {
        Locks::connect(&client)
            .await
            .unwrap()
            .ttl(Duration::from_secs(60))
            .wait_timeout(Duration::from_secs(5))
            .retry(RetryPolicy::new(
                Duration::from_secs(30),
                Duration::from_secs(30),
            ))
    };
    let holder = connect().await.lock("secure").await.unwrap();
    let f0 = holder.fencing_token();
    let waiter = {
        let locks = connect().await;
        tokio::spawn(async move { locks.lock("secure").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await; // subscribed and asleep
    holder.extend(Duration::from_secs(10)).await.unwrap();
    let released = std::time::Instant::now();
    holder.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "woken by the notification, not the 30 s backoff"
    );
    assert!(next.fencing_token() > f0);
    next.release().await.unwrap();
    drop(server.connection()); // the plain port is only the harness's

    // Trusting another CA, the handshake fails: no connection, no lock.
    let stranger = tls_client(tls_port, &certs.path().join("other.crt"));
    let err = stranger
        .get_multiplexed_async_connection()
        .await
        .unwrap_err();
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
}
