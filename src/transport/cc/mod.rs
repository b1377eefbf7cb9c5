//! Congestion control for RoCEv2, without I/O and without a clock: the notification point
//! (a receiver that answers CE-marked packets with CNPs, [`NotificationPoint`]) and the
//! reaction point (a sender that cuts and recovers its rate on CNPs, DCQCN,
//! [`ReactionPoint`]). Time goes in as a `Duration` since the caller's origin, as everywhere
//! in the transport core; the reaction point's output is a rate and the instant the QP may
//! send its next packet (a transmit budget the driver paces against).
//!
//! The algorithm is DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA
//! Deployments", SIGCOMM 2015); the parameters carry the names mlx5 exposes them under
//! (`rpg_*`, `dce_tcp_*`, `min_time_between_cnps`), see spec-notes/congestion.md for each
//! default and where it comes from. Everything is off unless [`CcConfig::enabled`].

mod config;
mod dcqcn;
mod np;
mod params;

pub use config::CcConfig;
pub use dcqcn::{DcqcnParams, ReactionPoint};
pub use np::NotificationPoint;
pub use params::{parse_mode, CcParamError, PARAM_NAMES};

/// The ECN field of an IP header (RFC 3168 section 5): the low two bits of the IPv4 TOS or
/// IPv6 traffic class.
pub const ECN_MASK: u8 = 0b11;
/// ECN-Capable Transport, codepoint ECT(0).
pub const ECN_ECT0: u8 = 0b10;
/// Congestion Experienced, set by a switch on an ECN-capable packet instead of dropping it.
pub const ECN_CE: u8 = 0b11;

/// Whether the traffic class a packet arrived with carries the CE mark.
pub fn is_ce(traffic_class: u8) -> bool {
    traffic_class & ECN_MASK == ECN_CE
}

/// The traffic class a packet leaves with when congestion control is on: the address
/// vector's DSCP with ECT(0). An ECN field the caller set (the address vector's low two bits)
/// is replaced, as a device that marks its packets ECN-capable does (mlx5 sets ECT(0) on
/// RoCEv2 packets when its congestion control is enabled).
pub fn with_ect0(traffic_class: u8) -> u8 {
    (traffic_class & !ECN_MASK) | ECN_ECT0
}
