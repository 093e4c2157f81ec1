//! Kernel operation sequences from several client domains and two threads, checked against
//! a model of which calls succeed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lrpc_fuzz::ops::{OpsInput, run};

fuzz_target!(|input: OpsInput| run(&input));
