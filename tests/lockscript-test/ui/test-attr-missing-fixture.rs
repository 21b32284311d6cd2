#[lockscript_test::test(fixtures("fixtures/does-not-exist.redis"))]
fn reads_a_fixture(conn: &mut redis::Connection) {
    let _ = conn;
}

fn main() {}
