//! Helpers shared by the integration tests that open device contexts over real sockets.
// Each test binary uses a subset.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr, UdpSocket};

use softroce::driver::DeviceConfig;
use softroce::verbs::Context;

/// Opens `n` contexts on one free UDP port of 127.0.0.1, 127.0.0.2, ... (the same port, as
/// RoCE devices on different hosts all use 4791), busy-polling or not, each with its own
/// engine. Retries with another port if one of the addresses has it taken.
pub fn contexts_with(n: u8, busy_poll: bool) -> Vec<Context> {
    for _ in 0..50 {
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let all: Vec<_> = (1..=n)
            .map(|i| {
                let mut cfg =
                    DeviceConfig::new(SocketAddr::new(IpAddr::from([127, 0, 0, i]), port));
                cfg.busy_poll = busy_poll;
                Context::open(&cfg)
            })
            .collect();
        if all.iter().all(|c| c.is_ok()) {
            return all.into_iter().map(|c| c.unwrap()).collect();
        }
    }
    panic!("no free UDP port for {n} contexts");
}

/// [`contexts_with`] for `n` blocking contexts.
pub fn contexts(n: u8) -> Vec<Context> {
    contexts_with(n, false)
}

/// Two contexts, on 127.0.0.1 and 127.0.0.2, busy-polling or not.
pub fn two_contexts_with(busy_poll: bool) -> (Context, Context) {
    let mut v = contexts_with(2, busy_poll);
    let b = v.pop().unwrap();
    let a = v.pop().unwrap();
    (a, b)
}

/// Two blocking contexts, on 127.0.0.1 and 127.0.0.2.
pub fn two_contexts() -> (Context, Context) {
    two_contexts_with(false)
}
