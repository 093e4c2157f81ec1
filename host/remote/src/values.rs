//! The types of a procedure's parameters and results, and reading values of them off a
//! stream in the wire encoding (translated into the A-stack encoding as they arrive). Client,
//! server and the NATS transport share them.

use crate::error::RemoteError;
use crate::wire::{self, CodecError};
use bytes::BytesMut;
use lrpc_kernel::presentation::InterfacePlan;
use lrpc_presentation::Ty;
use tokio::io::{AsyncRead, AsyncReadExt as _};

/// The types of `proc`'s parameters.
pub fn param_types(plan: &InterfacePlan, proc: usize) -> Result<Vec<&Ty>, RemoteError> {
    let p = plan
        .procs
        .get(proc)
        .ok_or(RemoteError::BadProcedure(proc))?;
    Ok(p.params.iter().map(|(_, t)| t).collect())
}

/// The types of `proc`'s results.
pub fn result_types(plan: &InterfacePlan, proc: usize) -> Result<Vec<&Ty>, RemoteError> {
    let p = plan
        .procs
        .get(proc)
        .ok_or(RemoteError::BadProcedure(proc))?;
    Ok(p.result.iter().collect())
}

/// Reads values of types `tys` from `incoming` until they are complete; A-stack encoded.
/// The outer error is the stream's, the inner one the values'.
///
/// The values are parsed again from the start whenever more bytes may complete them, so
/// attempts are spaced out: the next one waits until the buffer has doubled, or until the
/// peer has nothing more to send at once. A peer sending a long list in many small pieces
/// then costs parses whose sizes grow geometrically (linear work in all), not one per piece.
pub async fn read_values<R: AsyncRead + Unpin>(
    plan: &InterfacePlan,
    tys: &[&Ty],
    incoming: &mut R,
    limit: usize,
) -> Result<Result<Vec<u8>, CodecError>, std::io::Error> {
    read_counting(plan, tys, incoming, limit, &mut 0).await
}

/// [`read_values`], counting its parse attempts in `attempts`.
async fn read_counting<R: AsyncRead + Unpin>(
    plan: &InterfacePlan,
    tys: &[&Ty],
    incoming: &mut R,
    limit: usize,
    attempts: &mut usize,
) -> Result<Result<Vec<u8>, CodecError>, std::io::Error> {
    use futures::FutureExt as _;
    let mut buf = BytesMut::new();
    let mut ended = false;
    loop {
        *attempts += 1;
        match wire::from_wire(plan, tys, &buf, limit) {
            Err(CodecError::Incomplete) => {}
            Ok((v, _)) => return Ok(Ok(v)),
            Err(e) => return Ok(Err(e)),
        }
        if ended || incoming.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        // Take what is there without waiting, up to twice the size of this attempt.
        let next = buf.len().saturating_mul(2).max(64);
        while buf.len() < next {
            match incoming.read_buf(&mut buf).now_or_never() {
                None => break,
                Some(Ok(0)) => {
                    ended = true;
                    break;
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
            }
        }
    }
}

pub(crate) async fn read_result<R: AsyncRead + Unpin>(
    plan: &InterfacePlan,
    tys: &[&Ty],
    mut incoming: R,
    limit: usize,
) -> Result<Vec<u8>, RemoteError> {
    if tys.is_empty() {
        // A procedure without a result answers with the end of the stream.
        let mut b = [0u8; 1];
        return match incoming.read(&mut b).await {
            Ok(0) => Ok(Vec::new()),
            Ok(_) => Err(RemoteError::BadReply(CodecError::Trailing(1))),
            Err(e) => Err(RemoteError::PeerFailed(e.to_string())),
        };
    }
    match read_values(plan, tys, &mut incoming, limit).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(RemoteError::BadReply(e)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(RemoteError::PeerFailed(
            "the connection closed before the result".into(),
        )),
        Err(e) => Err(RemoteError::PeerFailed(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A stream that gives one byte per read, always at once: the worst trickle.
    struct Trickle(std::collections::VecDeque<u8>);

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            if let Some(b) = self.0.pop_front() {
                buf.put_slice(&[b]);
            }
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_trickled_list_is_parsed_a_logarithmic_number_of_times() {
        let wit = lrpc_presentation::Wit::load_sources(&[(
            "t.wit",
            "package t:t; interface i { f: func(a: list<string>); }",
        )])
        .unwrap();
        let plan = wit.interface("t:t/i").unwrap();
        let tys = param_types(&plan, 0).unwrap();
        // 20,000 one-byte strings, LEB128 counts and lengths: 60 KB on the wire.
        let mut wire = BytesMut::new();
        wire::put_uleb(&mut wire, 20_000);
        for i in 0..20_000u32 {
            wire::put_uleb(&mut wire, 1);
            wire.extend_from_slice(&[b'a' + (i % 26) as u8]);
        }
        let mut attempts = 0;
        let mut src = Trickle(wire.to_vec().into());
        let got = read_counting(&plan, &tys, &mut src, 1 << 20, &mut attempts)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(wire::to_wire(&plan, &tys, &got).unwrap(), wire);
        // One attempt per doubling of the buffer, not one per byte.
        assert!(attempts <= 20, "{attempts} parses");
    }
}
