//! The device's congestion control settings: the switch, the notification point's and the
//! reaction point's parameters (spec-notes/congestion.md).

use std::time::Duration;

use super::dcqcn::DcqcnParams;

/// The device's congestion control configuration (part of the driver's `DeviceConfig`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CcConfig {
    /// The off switch. Off (the default, as kernel rxe): packets keep the address vector's
    /// traffic class as it is, CE marks are not answered and CNPs received are counted and
    /// dropped. On: ECT(0) on every RoCE packet, a CNP for CE-marked packets of RC and UC QPs,
    /// DCQCN pacing of every RC and UC QP.
    pub enabled: bool,
    /// Notification point: the least time between two CNPs to one QP (mlx5
    /// `min_time_between_cnps`; the paper's N).
    pub min_time_between_cnps: Duration,
    /// Notification point: the DSCP of the CNPs sent (mlx5 `cnp_dscp`), with ECT(0); `None`
    /// (the default): the QP's address vector's DSCP, as its other packets.
    pub cnp_dscp: Option<u8>,
    /// Reaction point parameters.
    pub rp: DcqcnParams,
}

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig {
            enabled: false,
            // The paper's N = 50 us (section 3.2: "at most one CNP every N microseconds").
            min_time_between_cnps: Duration::from_micros(50),
            cnp_dscp: None,
            rp: DcqcnParams::default(),
        }
    }
}

impl CcConfig {
    /// The configuration with congestion control switched on and the defaults.
    pub fn on() -> CcConfig {
        CcConfig {
            enabled: true,
            ..CcConfig::default()
        }
    }
}
