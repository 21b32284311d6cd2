//! A pool of connections as a lock handle's connection: [`Pooled`] hands each command
//! to a connection of a [`bb8`] pool, as a service that shares a pool between its
//! handlers would. Two commands of one lock then go on different connections, and one
//! held up on its way (the fault [`proxy`](crate::proxy) delays one request and those
//! behind it on its connection) is overtaken by a later one: the order a lock's
//! commands reach the server is not the order they were sent.
//!
//! ```no_run
//! # async fn f() {
//! let server = lockscript_test::server::RedisServer::start();
//! let pool = lockscript_test::pool::Pooled::open(&server.client(), 2).await;
//! let locks = lockscript::Locks::new(pool);
//! # }
//! ```

use redis::aio::{ConnectionLike, MultiplexedConnection};

/// A [`bb8`] pool of multiplexed connections that runs each command on the connection
/// it hands out (its default, first in first out: the one idle the longest).
#[derive(Clone)]
pub struct Pooled(bb8::Pool<redis::Client>);

impl Pooled {
    /// A pool of `size` connections through `client`, all open before it returns (so
    /// that two commands in a row go on two connections).
    pub async fn open(client: &redis::Client, size: u32) -> Self {
        let pool = bb8::Pool::builder()
            .max_size(size)
            .min_idle(Some(size))
            .build(client.clone())
            .await
            .expect("the pool's connections");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while pool.state().idle_connections < size {
            assert!(
                std::time::Instant::now() < deadline,
                "the pool opened {} of {size} connections",
                pool.state().idle_connections
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        Self(pool)
    }

    async fn get(&self) -> redis::RedisResult<bb8::PooledConnection<'_, redis::Client>> {
        self.0.get().await.map_err(|e| match e {
            bb8::RunError::User(e) => e,
            bb8::RunError::TimedOut => redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no pooled connection in time",
            )),
        })
    }
}

impl ConnectionLike for Pooled {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        Box::pin(async move {
            let mut conn = self.get().await?;
            let conn: &mut MultiplexedConnection = &mut conn;
            conn.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        Box::pin(async move {
            let mut conn = self.get().await?;
            let conn: &mut MultiplexedConnection = &mut conn;
            conn.req_packed_commands(cmd, offset, count).await
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
