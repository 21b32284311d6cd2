#[lockscript_test::test(fixtures("fixtures/unknown-command.redis"))]
fn reads_a_fixture(conn: &mut redis::Connection) {
    let _ = conn;
}

fn main() {}
