//! Integration tests of the lrpc kernel live in `all/`, one binary with a module per area.
#![warn(missing_docs)]
