//! A script that holds a NUL byte: Redis runs it by scripts and by Functions; Valkey
//! runs it by scripts, but compiles a Functions library only up to its first NUL byte,
//! so the library cannot load there, which is a typed error that says what to do. (Its
//! own test binary: the script is in this binary's library.)

use lockscript::{Delivery, LockError, lock_script};
use lockscript_test::has_functions;
use lockscript_test::server::RedisServer;

/// GETs the key; its file holds a NUL byte in a comment.
#[lock_script("lua/nul.lua")]
fn nul(#[key] key: &str) -> Option<String>;

#[test]
fn a_nul_byte_runs_by_scripts_and_by_functions_where_the_server_loads_it() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    assert!(nul("k").script().bytes().contains(&0));
    assert!(lockscript::functions_library().code.contains(&0));
    redis::cmd("SET").arg("k").arg("v").exec(&mut conn).unwrap();
    assert_eq!(nul("k").invoke(&mut conn).unwrap().as_deref(), Some("v"));
    if !has_functions(&mut conn) {
        eprintln!("skipped: the server has no Redis Functions (before 7.0)");
        return;
    }
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).unwrap();
    let by_functions = nul("k").delivery(Delivery::Functions).invoke(&mut conn);
    if info.contains("valkey_version:") {
        let err = by_functions.unwrap_err();
        assert!(
            matches!(&err, LockError::Unsupported { what, message, .. }
                if what.contains("NUL") && message.contains("Error compiling function")),
            "{err:?}"
        );
        assert!(err.to_string().contains("Delivery::Scripts"), "{err}");
        let err = lockscript::load_functions(&mut conn).unwrap_err();
        assert!(matches!(&err, LockError::Unsupported { .. }), "{err:?}");
    } else {
        assert_eq!(by_functions.unwrap().as_deref(), Some("v"));
    }
}
