//! Waiting on a future from a plain thread, timed by the OS: how the blocking executor
//! waits on what the async one awaits (tokio's runtime-free `Notify`, `oneshot` and
//! `Mutex`).

use std::sync::Arc;
use std::time::Duration;

/// Polls `future` on the calling thread until it completes or `timeout` passes: the
/// thread parks with the OS's timeout and is unparked by the future's wake-up (a tokio
/// timer made outside the runtime fires only when the runtime's thread next wakes).
pub(crate) fn block_within<F: std::future::Future>(
    future: F,
    timeout: Duration,
) -> Option<F::Output> {
    use std::task::{Context, Poll, Wake, Waker};
    use std::time::Instant;

    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }

    let deadline = Instant::now() + timeout;
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return Some(value);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        std::thread::park_timeout(left);
    }
}
