//! A connection that cannot be opened says where it tried and why, on both faces: a
//! refused port, a database index the server does not have, a wrong password. Each
//! error names the address and gives the hint that fits its cause, not one for all.

use lockscript::LockError;
use lockscript_test::server::{RedisServer, free_port, release_port};

/// What both faces answer when connecting to `url`.
async fn both_faces(url: &str) -> Vec<LockError> {
    let client = redis::Client::open(url).expect("a well-formed URL");
    let Err(async_err) = lockscript::Locks::connect(&client).await else {
        panic!("the async face connected to {url}")
    };
    let client2 = client.clone();
    let blocking_err =
        tokio::task::spawn_blocking(
            move || match lockscript::blocking::Locks::connect(&client2) {
                Err(e) => e,
                Ok(_) => panic!("the blocking face connected"),
            },
        )
        .await
        .expect("the blocking connect returned");
    vec![async_err, blocking_err]
}

/// Each error is a `Connect` naming `address`, says every one of `says` and none of
/// `not`.
fn assert_names(errors: &[LockError], address: &str, says: &[&str], not: &[&str]) {
    for e in errors {
        let text = e.to_string();
        assert!(
            matches!(e, LockError::Connect { address: a, .. } if a == address),
            "a Connect error naming {address}: {e:?}"
        );
        assert!(
            text.contains(address),
            "names the address {address}: {text}"
        );
        for hint in says {
            assert!(text.contains(hint), "says `{hint}`: {text}");
        }
        for wrong in not {
            assert!(!text.contains(wrong), "does not say `{wrong}`: {text}");
        }
    }
}

/// A server that wants the password `right-password`.
fn with_password() -> RedisServer {
    let server = RedisServer::start();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("right-password")
        .query(&mut server.connection())
        .unwrap();
    server
}

#[tokio::test]
async fn a_refused_port_names_the_address_and_says_nothing_listens() {
    let port = free_port();
    let errors = both_faces(&format!("redis://127.0.0.1:{port}/")).await;
    release_port(port);
    assert_names(
        &errors,
        &format!("127.0.0.1:{port}"),
        &["no server is listening"],
        &["no such database"],
    );
}

#[tokio::test]
async fn a_database_index_the_server_lacks_says_so() {
    let server = RedisServer::start();
    let errors = both_faces(&format!("redis://127.0.0.1:{}/99", server.port())).await;
    assert_names(
        &errors,
        &format!("127.0.0.1:{}", server.port()),
        &["(database 99): ", "no such database index"],
        &["up and reachable"],
    );
}

#[tokio::test]
async fn a_wrong_password_says_to_check_the_credentials() {
    let server = with_password();
    let errors = both_faces(&format!(
        "redis://:wrong-password@127.0.0.1:{}/",
        server.port()
    ))
    .await;
    assert_names(
        &errors,
        &format!("127.0.0.1:{}", server.port()),
        &["user and password"],
        // Never the password itself.
        &["up and reachable", "wrong-password"],
    );
}

#[tokio::test]
async fn a_password_missing_from_the_url_is_a_connect_error_not_a_script_error() {
    let server = with_password();
    let errors = both_faces(&format!("redis://127.0.0.1:{}/", server.port())).await;
    assert_names(
        &errors,
        &format!("127.0.0.1:{}", server.port()),
        &["NOAUTH", "user and password"],
        &["script `"],
    );
}
