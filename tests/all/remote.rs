//! Remote exports as the kernel sees them: a [`RemoteTarget`] registered with
//! `Kernel::export_remote` is bound and called by a guest through its ordinary stub. The
//! target here is in this process, so every byte it sees and answers is under the test's
//! control (the wRPC transport has its own tests in `host/remote`).

use lrpc_artifacts as artifacts;
use lrpc_kernel::{Kernel, Status, transport::RemoteTarget};
use std::sync::{Arc, Mutex};

const BENCH: &str = "lrpc:bench/bench";

/// How a scripted target answers a procedure's request.
type Answer = Box<dyn Fn(usize, &[u8]) -> Result<Vec<u8>, Status> + Send + Sync>;

/// Answers every call with `answer`, and records the requests it saw.
struct Scripted {
    seen: Mutex<Vec<(usize, Vec<u8>)>>,
    answer: Answer,
}

impl RemoteTarget for Scripted {
    fn call(&self, proc: usize, request: &[u8]) -> Result<Vec<u8>, Status> {
        self.seen.lock().unwrap().push((proc, request.to_vec()));
        (self.answer)(proc, request)
    }
}

fn proc_index(kernel: &Kernel, name: &str) -> usize {
    kernel
        .interface(BENCH)
        .unwrap()
        .procs
        .iter()
        .position(|p| p.name == name)
        .unwrap()
}

fn scripted(
    answer: impl Fn(usize, &[u8]) -> Result<Vec<u8>, Status> + Send + Sync + 'static,
) -> Arc<Scripted> {
    Arc::new(Scripted {
        seen: Mutex::new(Vec::new()),
        answer: Box::new(answer),
    })
}

#[test]
fn a_guest_calls_a_remote_target_through_its_stub() {
    let _g = crate::shared();
    let kernel = Kernel::new().unwrap();
    let (add, big_in_out) = (
        proc_index(&kernel, "add"),
        proc_index(&kernel, "big-in-out"),
    );
    let target = scripted(move |proc, req| {
        if proc == add {
            let a = u32::from_le_bytes(req[..4].try_into().unwrap());
            let b = u32::from_le_bytes(req[4..8].try_into().unwrap());
            Ok(a.wrapping_add(b).to_le_bytes().to_vec())
        } else if proc == big_in_out {
            // The request is a length-prefixed list; the answer the same list xor 0x5a.
            let mut out = req.to_vec();
            out[4..].iter_mut().for_each(|b| *b ^= 0x5a);
            Ok(out)
        } else {
            Ok(Vec::new())
        }
    });
    let _face = kernel.export_remote(BENCH, BENCH, target.clone()).unwrap();
    let client = kernel
        .domain("bench-client", artifacts::BENCH_CLIENT)
        .unwrap();
    assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
    assert_eq!(client.call::<(i32, i32), i64>("add", (40, 2)).unwrap(), 42);
    {
        let seen = target.seen.lock().unwrap();
        let (proc, req) = seen.last().unwrap();
        assert_eq!(*proc, add);
        // The procedure is bounded: the request is its A-stack, the parameters first.
        assert_eq!(&req[..8], &[40, 0, 0, 0, 2, 0, 0, 0]);
    }
    // Large arguments and results travel through the binding's out-of-band segments.
    for len in [200, 100_000] {
        assert_eq!(
            client
                .call::<(i32, i32), i32>("big_in_out", (len, 2))
                .unwrap(),
            0,
            "big_in_out({len})"
        );
        let seen = target.seen.lock().unwrap();
        assert_eq!(seen.last().unwrap().1.len(), 4 + len as usize);
    }
    assert!(kernel.exported().iter().any(|n| n == BENCH));
}

#[test]
fn what_a_remote_target_answers_is_checked() {
    let _g = crate::shared();
    let kernel = Kernel::new().unwrap();
    let (add, big_in_out) = (
        proc_index(&kernel, "add"),
        proc_index(&kernel, "big-in-out"),
    );
    let target = scripted(move |proc, _| {
        if proc == add {
            // Larger than the procedure's A-stack.
            Ok(vec![1; 1 << 16])
        } else if proc == big_in_out {
            // A list whose length runs past the reply.
            Ok(vec![0xff, 0xff, 0xff, 0x7f, 1, 2, 3])
        } else {
            Err(Status::DeadlineExceeded)
        }
    });
    let stand_in = kernel.export_remote(BENCH, BENCH, target).unwrap();
    let client = kernel
        .domain("bench-client", artifacts::BENCH_CLIENT)
        .unwrap();
    assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
    let code = |s: Status| -i64::from(s as i32);
    assert_eq!(
        client.call::<(i32, i32), i64>("add", (1, 2)).unwrap(),
        code(Status::ResourceExhausted)
    );
    let r = client
        .call::<(i32, i32), i32>("big_in_out", (200, 1))
        .unwrap();
    assert!(r < 0, "a malformed reply is refused by the stub: {r}");
    // The target's own failure is the call's status; the client keeps running.
    assert_eq!(
        client.call::<i32, i32>("null", 1).unwrap(),
        Status::DeadlineExceeded as i32
    );
    // A second export under the same name is refused; the stand-in's name stays taken until it
    // is terminated.
    let again = kernel.export_remote(BENCH, BENCH, scripted(|_, _| Ok(Vec::new())));
    assert!(
        matches!(again, Err(lrpc_kernel::Error::NameTaken(_))),
        "{again:?}"
    );
    kernel.terminate(&stand_in);
    assert_eq!(
        client.call::<(i32, i32), i64>("add", (1, 2)).unwrap(),
        code(Status::ServerTerminated)
    );
    let _face = kernel
        .export_remote(
            BENCH,
            BENCH,
            scripted(|_, _| Ok(7u32.to_le_bytes().to_vec())),
        )
        .unwrap();
    assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
    assert_eq!(client.call::<(i32, i32), i64>("add", (1, 2)).unwrap(), 7);
}
