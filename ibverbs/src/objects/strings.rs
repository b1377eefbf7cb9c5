//! Names of enum values, and the rate conversions.

use std::ffi::CStr;

use libc::{c_char, c_int, c_uint};
use softroce::ib::WcStatus;

macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr() as *const c_char
    };
}

/// `ibv_wc_status_str`.
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_uint) -> *const c_char {
    const NAMES: [&CStr; 23] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
    ];
    let _ = WcStatus::Success; // the values of WcStatus are these indices
    match NAMES.get(status as usize) {
        Some(s) => s.as_ptr(),
        None if status == 23 => cstr!("TM Rendezvous error"),
        None => cstr!("unknown"),
    }
}

/// `ibv_port_state_str`.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(state: c_uint) -> *const c_char {
    match state {
        0 => cstr!("PORT_NOP"),
        1 => cstr!("PORT_DOWN"),
        2 => cstr!("PORT_INIT"),
        3 => cstr!("PORT_ARMED"),
        4 => cstr!("PORT_ACTIVE"),
        5 => cstr!("PORT_ACTIVE_DEFER"),
        _ => cstr!("invalid state"),
    }
}

/// `ibv_node_type_str`.
#[no_mangle]
pub extern "C" fn ibv_node_type_str(t: c_int) -> *const c_char {
    match t {
        1 => cstr!("InfiniBand channel adapter"),
        2 => cstr!("InfiniBand switch"),
        3 => cstr!("InfiniBand router"),
        4 => cstr!("iWARP NIC"),
        5 => cstr!("usNIC"),
        6 => cstr!("usNIC UDP"),
        7 => cstr!("unspecified"),
        _ => cstr!("unknown"),
    }
}

/// `ibv_event_type_str`.
#[no_mangle]
pub extern "C" fn ibv_event_type_str(e: c_uint) -> *const c_char {
    const NAMES: [&CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    NAMES
        .get(e as usize)
        .map_or(cstr!("unknown"), |s| s.as_ptr())
}

/// (enum ibv_rate, multiple of 2.5 Gb/s, Mb/s) for the rates of `enum ibv_rate`.
const RATES: [(c_int, c_int, c_int); 21] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (7, 12, 30000),
    (8, 16, 40000),
    (9, 24, 60000),
    (4, 32, 80000),
    (10, 48, 120000),
    (11, 6, 14062),
    (12, 22, 56250),
    (13, 45, 112500),
    (14, 67, 168750),
    (15, 10, 25000),
    (16, 40, 100000),
    (17, 80, 200000),
    (18, 120, 300000),
    (19, 20, 28000),
    (20, 20, 50000),
    (21, 160, 400000),
    (22, 240, 600000),
];

/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s (0 for unknown rates).
#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(0, |r| r.1)
}

/// `mult_to_ibv_rate`: the inverse of `ibv_rate_to_mult` (IBV_RATE_MAX = 0 if none).
#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES[..9].iter().find(|r| r.1 == mult).map_or(0, |r| r.0)
}

/// `ibv_rate_to_mbps`.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(0, |r| r.2)
}

/// `mbps_to_ibv_rate`.
#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}
