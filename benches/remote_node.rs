//! The remote kernel of the `remote` benchmark: `lrpc_remote::node` (see `lrpc-remote-node`).

fn main() -> anyhow::Result<()> {
    let config = lrpc_remote::node::NodeConfig::from_args(std::env::args().skip(1))
        .map_err(anyhow::Error::msg)?;
    lrpc_remote::node::run(&config)?;
    Ok(())
}
