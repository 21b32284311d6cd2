#[lockscript_test::test(fixtures("fixtures/bad-quoting.redis"))]
fn reads_a_fixture(conn: &mut redis::Connection) {
    let _ = conn;
}

fn main() {}
