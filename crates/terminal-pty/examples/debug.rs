#![allow(missing_docs, clippy::unwrap_used)]
use std::time::Duration;
use terminal_pty::PtyTerminals;
use terminal_seam::*;
#[tokio::main]
async fn main() {
    let s = PtyTerminals::default();
    let o = Owner::new("d");
    let id = s.open(&o, OpenRequest::default()).await.unwrap().id;
    let r = s.send(&o, id, SendRequest::line("echo READY-NOW; sleep 30").with_until("READY-[A-Z]+")).await.unwrap();
    println!("{r:?}");
    let fg = s.signal(&o, id, TerminalSignal::Int).await.unwrap();
    println!("{fg:?} list {:?}", s.list(&o).await);
    let r = s.send(&o, id, SendRequest::line("echo back").with_timeout(Duration::from_secs(2))).await.unwrap();
    println!("{r:?}");
    if let ReadOutcome::Stream(c) = s.read(&o, id, ReadRequest::Stream{since: Some(0), max_bytes: None}).await.unwrap() { println!("{:?}", c.output); }
    if let ReadOutcome::Screen(c) = s.read(&o, id, ReadRequest::Screen).await.unwrap() { println!("{}", c.screen); }
}
