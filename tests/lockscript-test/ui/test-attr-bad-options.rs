#[lockscript_test::test(flavour = "multi_thread")]
fn misspelled_option() {}

#[lockscript_test::test(flavor = "single")]
fn unknown_flavor() {}

fn main() {}
