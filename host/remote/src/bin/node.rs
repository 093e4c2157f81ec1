//! `lrpc-remote-node`: a kernel serving the bench (`lrpc:bench/bench`) and key-value
//! (`lrpc:kv/store`) servers to the network.
//!
//! ```text
//! lrpc-remote-node [--listen tcp:HOST:PORT | unix:PATH | nats://HOST:PORT[/PREFIX]]...
//!                  [--nats nats://HOST:PORT[/PREFIX]] [--group NAME] [--workers N] [--wait-us N]
//!                  [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]] [--insecure]
//! ```
//!
//! Prints `listening <endpoint>` for every listener once it accepts connections (port 0
//! picks a free port), then serves until killed. On NATS the node subscribes its exports in
//! queue group NAME (default `lrpc`): nodes in one group share the calls. With a NATS
//! listener it answers a line `served` on stdin with `served N` (calls served over NATS). `--wait-us` adds that much waiting before
//! every call (server time for the MultiRPC experiment). With `--tls-cert` and `--tls-key` the
//! `tcp:` listeners serve over TLS; a `tcp:` listener other machines can reach (not loopback)
//! needs TLS or `--insecure`.

fn main() -> anyhow::Result<()> {
    let config = lrpc_remote::node::NodeConfig::from_args(std::env::args().skip(1))
        .map_err(anyhow::Error::msg)?;
    lrpc_remote::node::run(&config)?;
    Ok(())
}
