//! The tokio-facing part of the channel API: calls bounded by a tokio timer.

use super::{AsyncBinding, CallError};
use std::future::Future;
use std::time::Duration;

impl AsyncBinding {
    /// [`call_async`](AsyncBinding::call_async) bounded by `timeout` on the tokio timer: when
    /// it passes first the call is cancelled ([`CallError::TimedOut`]) and a late reply is
    /// discarded. The request is sent at once; the future must run inside a tokio runtime
    /// with the time driver enabled.
    pub fn call_timeout(
        &self,
        proc: usize,
        args: &[u8],
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<u8>, CallError>> + Send + 'static {
        let call = self.call_async(proc, args);
        async move {
            match tokio::time::timeout(timeout, call).await {
                Ok(r) => r,
                Err(_) => Err(CallError::TimedOut),
            }
        }
    }
}
