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
pub async fn read_values<R: AsyncRead + Unpin>(
    plan: &InterfacePlan,
    tys: &[&Ty],
    incoming: &mut R,
    limit: usize,
) -> Result<Result<Vec<u8>, CodecError>, std::io::Error> {
    let mut buf = BytesMut::new();
    loop {
        match wire::from_wire(plan, tys, &buf, limit) {
            Err(CodecError::Incomplete) => {}
            Ok((v, _)) => return Ok(Ok(v)),
            Err(e) => return Ok(Err(e)),
        }
        if incoming.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
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
