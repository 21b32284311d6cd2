//! A pool of connections to one server, used round robin: each command goes out on the
//! next connection, as a pool hands out whichever one is free. A lease's commands then
//! travel on different connections, and a fault on one of them (held back, cut) reorders
//! them: what the chaos checker's pooled actor puts the lock through.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};

/// `size` managed connections to one server, each command on the next.
#[derive(Clone)]
pub struct RoundRobin {
    conns: Arc<Vec<ConnectionManager>>,
    next: Arc<AtomicUsize>,
}

impl RoundRobin {
    /// Opens `size` managed connections to `client`'s server (reconnecting by themselves
    /// as `Locks::connect`'s does; the lock bounds each call itself).
    ///
    /// # Errors
    ///
    /// When a connection cannot be opened.
    pub async fn connect(client: &redis::Client, size: usize) -> redis::RedisResult<Self> {
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500))
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(None);
        let mut conns = Vec::with_capacity(size);
        for _ in 0..size.max(1) {
            conns.push(
                client
                    .get_connection_manager_with_config(config.clone())
                    .await?,
            );
        }
        Ok(Self {
            conns: Arc::new(conns),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn pick(&self) -> ConnectionManager {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        self.conns[i].clone()
    }
}

impl ConnectionLike for RoundRobin {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        let mut conn = self.pick();
        Box::pin(async move { conn.req_packed_command(cmd).await })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        let mut conn = self.pick();
        Box::pin(async move { conn.req_packed_commands(cmd, offset, count).await })
    }

    fn get_db(&self) -> i64 {
        self.conns[0].get_db()
    }
}
