// A broken fixture that several tests share is reported once, at the first test that
// uses it: the same problem again at each test would bury the one to fix.
#[lockscript_test::test(fixtures("fixtures/unknown-command.redis"))]
fn first(conn: &mut redis::Connection) {
    let _ = conn;
}

#[lockscript_test::test(fixtures("fixtures/unknown-command.redis"))]
fn second(conn: &mut redis::Connection) {
    let _ = conn;
}

#[lockscript_test::test(fixtures("fixtures/unknown-command.redis"))]
fn third(conn: &mut redis::Connection) {
    let _ = conn;
}

fn main() {}
