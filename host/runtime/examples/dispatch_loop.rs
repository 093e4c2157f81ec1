//! Profiling aid (not committed).
use lrpc_runtime::{config::Config, deploy::Deployment, edge::Edge};
use std::sync::Arc;
fn main() {
    let mut args = std::env::args().skip(1);
    let config = args.next().unwrap();
    let path = args.next().unwrap();
    let n: usize = args.next().unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let edge = Edge::start(Arc::new(
            Deployment::start(Config::load(config.as_ref()).unwrap()).unwrap(),
        ))
        .unwrap();
        let h = vec![
            ("host".to_string(), "127.0.0.1:18181".to_string()),
            ("authorization".to_string(), "Bearer letmein".to_string()),
        ];
        tokio::spawn(async move {
            for _ in 0..200 {
                edge.dispatch("GET", &path, &h, b"").await;
            }
            let t = std::time::Instant::now();
            for _ in 0..n {
                edge.dispatch("GET", &path, &h, b"").await;
            }
            eprintln!("{:?} per request", t.elapsed() / n as u32);
            std::process::exit(0);
        })
        .await
        .unwrap();
    });
}
