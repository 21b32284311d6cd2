//! Declares a script outside the lockscript workspace, calls it sync and async, and
//! checks its digest and registry entry. Usage: `external-user <redis-url>`.
#![forbid(unsafe_code)]

use external_user::bump;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args().nth(1).ok_or("usage: external-user <redis-url>")?;
    let client = redis::Client::open(url)?;

    let mut conn = client.get_connection()?;
    let sync_value = bump("external:counter", 2).invoke(&mut conn)?;
    let mut aconn = client.get_multiplexed_async_connection().await?;
    let async_value = bump("external:counter", 3).invoke_async(&mut aconn).await?;

    let script = bump("x", 0).script();
    let registered = lockscript::scripts().any(|s| std::ptr::eq(s, script));
    let builtin = lockscript::scripts().filter(|s| s.path().starts_with("scripts/")).count();
    println!("sync={sync_value} async={async_value}");
    println!("name={} sha1={}", script.name(), script.sha1());
    println!("registered={registered} builtin={builtin}");
    Ok(())
}
