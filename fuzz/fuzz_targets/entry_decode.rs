//! The generated server entry stubs of the real server guests on arbitrary A-stack and
//! out-of-band contents: a status, never a trap or a stray access.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lrpc_fuzz::entry::{EntryInput, run};

fuzz_target!(|input: EntryInput| {
    run(&input);
});
