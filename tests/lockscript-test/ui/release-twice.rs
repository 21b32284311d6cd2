// A guard is released once: the second release is a compile error that names the type
// the user wrote (`LockGuard`), not the engine's generic guard over its backend.
async fn twice(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
    let guard = locks.lock("orders:42").await?;
    guard.release().await?;
    guard.release().await?;
    Ok(())
}

fn main() {
    drop(twice);
}
