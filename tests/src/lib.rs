//! Test support for lockscript: a private `redis-server` per test.

pub mod server;
