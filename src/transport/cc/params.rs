//! Congestion control configuration from text: the mode (`dcqcn` or `none`) and parameters as
//! `name=value` under the names NVIDIA's DCQCN parameter table and mlx5 use (`rpg_ai_rate`,
//! `min_time_between_cnps`, ...), so that the CLI's `--cc`/`--cc-param` and the libibverbs
//! shim's `SOFTROCE_CC`/`SOFTROCE_CC_PARAMS` accept, check and refuse exactly the same things.
//! Units as mlx5's: rates in Mb/s, times in microseconds, byte counts in bytes, `dce_tcp_g` and
//! `initial_alpha_value` in 1/1024.

use std::fmt;
use std::time::Duration;

use super::config::CcConfig;

/// Why a congestion control setting was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum CcParamError {
    /// The mode is neither `dcqcn` nor `none`.
    Mode(String),
    /// An entry is not `name=value`.
    Syntax(String),
    /// No parameter has this name.
    Unknown(String),
    /// The value is out of the parameter's range or not a number.
    Value {
        /// The parameter.
        name: &'static str,
        /// The value given.
        value: String,
        /// What the parameter takes.
        expected: &'static str,
    },
    /// Parameters given with congestion control off, where they would do nothing.
    ParamsWithoutCc,
    /// `rpg_min_rate` above `rpg_max_rate`.
    MinAboveMax {
        /// rpg_min_rate, Mb/s.
        min: f64,
        /// rpg_max_rate, Mb/s.
        max: f64,
    },
}

impl fmt::Display for CcParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CcParamError::Mode(m) => {
                write!(f, "congestion control '{m}': must be dcqcn or none")
            }
            CcParamError::Syntax(s) => {
                write!(f, "congestion control parameter '{s}': not NAME=VALUE")
            }
            CcParamError::Unknown(n) => write!(
                f,
                "unknown congestion control parameter '{n}' (known: {})",
                PARAM_NAMES.join(", ")
            ),
            CcParamError::Value {
                name,
                value,
                expected,
            } => write!(f, "{name}={value}: {name} must be {expected}"),
            CcParamError::ParamsWithoutCc => write!(
                f,
                "congestion control parameters need congestion control on (dcqcn)"
            ),
            CcParamError::MinAboveMax { min, max } => write!(
                f,
                "rpg_min_rate {min} Mb/s is above rpg_max_rate {max} Mb/s"
            ),
        }
    }
}

impl std::error::Error for CcParamError {}

/// Every parameter [`CcConfig::set_param`] takes.
pub const PARAM_NAMES: &[&str] = &[
    "rpg_max_rate",
    "rpg_time_reset",
    "rpg_byte_reset",
    "rpg_threshold",
    "rpg_ai_rate",
    "rpg_hai_rate",
    "rpg_min_dec_fac",
    "rpg_min_rate",
    "dce_tcp_g",
    "dce_tcp_rtt",
    "initial_alpha_value",
    "rate_reduce_monitor_period",
    "min_time_between_cnps",
    "cnp_dscp",
];

/// Parses the mode: `dcqcn` (on) or `none` (off), case-insensitive.
pub fn parse_mode(s: &str) -> Result<bool, CcParamError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "dcqcn" => Ok(true),
        "none" => Ok(false),
        _ => Err(CcParamError::Mode(s.to_string())),
    }
}

/// An integer in `lo..=hi`.
fn int(
    name: &'static str,
    v: &str,
    lo: u64,
    hi: u64,
    expected: &'static str,
) -> Result<u64, CcParamError> {
    match v.trim().parse::<u64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(CcParamError::Value {
            name,
            value: v.to_string(),
            expected,
        }),
    }
}

/// A rate in Mb/s: finite, at least `lo` (and positive when `lo` is 0 only if `positive`).
fn rate(
    name: &'static str,
    v: &str,
    positive: bool,
    expected: &'static str,
) -> Result<f64, CcParamError> {
    match v.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && (r > 0.0 || (!positive && r == 0.0)) && r <= 1e9 => Ok(r),
        _ => Err(CcParamError::Value {
            name,
            value: v.to_string(),
            expected,
        }),
    }
}

/// Microseconds, at most an hour (a longer timer is a typo, not a setting).
fn micros(
    name: &'static str,
    v: &str,
    lo: u64,
    expected: &'static str,
) -> Result<Duration, CcParamError> {
    int(name, v, lo, 3_600_000_000, expected).map(Duration::from_micros)
}

impl CcConfig {
    /// Sets the parameter `name` to `value` (see [`PARAM_NAMES`] and the module
    /// documentation for the units); the configuration is unchanged on an error.
    pub fn set_param(&mut self, name: &str, value: &str) -> Result<(), CcParamError> {
        let rp = &mut self.rp;
        match name.trim() {
            "rpg_max_rate" => {
                rp.max_rate_mbps = rate("rpg_max_rate", value, true, "a rate in Mb/s above 0")?
            }
            "rpg_time_reset" => {
                rp.rpg_time_reset = micros(
                    "rpg_time_reset",
                    value,
                    1,
                    "a period of 1..3600000000 microseconds",
                )?
            }
            "rpg_byte_reset" => {
                rp.rpg_byte_reset = int(
                    "rpg_byte_reset",
                    value,
                    1,
                    u32::MAX as u64,
                    "a byte count of 1..4294967295",
                )?
            }
            "rpg_threshold" => {
                rp.rpg_threshold =
                    int("rpg_threshold", value, 1, 31, "a stage count of 1..31")? as u32
            }
            "rpg_ai_rate" => {
                rp.rpg_ai_rate_mbps =
                    rate("rpg_ai_rate", value, false, "a rate in Mb/s, 0 or more")?
            }
            "rpg_hai_rate" => {
                rp.rpg_hai_rate_mbps =
                    rate("rpg_hai_rate", value, false, "a rate in Mb/s, 0 or more")?
            }
            "rpg_min_dec_fac" => {
                rp.rpg_min_dec_fac =
                    int("rpg_min_dec_fac", value, 1, 100, "a percentage of 1..100")? as u32
            }
            "rpg_min_rate" => {
                rp.rpg_min_rate_mbps = rate("rpg_min_rate", value, true, "a rate in Mb/s above 0")?
            }
            "dce_tcp_g" => {
                rp.dce_tcp_g = int("dce_tcp_g", value, 0, 1023, "0..1023 (in 1/1024)")? as u32
            }
            "dce_tcp_rtt" => {
                rp.dce_tcp_rtt = micros(
                    "dce_tcp_rtt",
                    value,
                    1,
                    "a period of 1..3600000000 microseconds",
                )?
            }
            "initial_alpha_value" => {
                rp.initial_alpha_value =
                    int("initial_alpha_value", value, 0, 1023, "0..1023 (in 1/1024)")? as u32
            }
            "rate_reduce_monitor_period" => {
                rp.rate_reduce_monitor_period = micros(
                    "rate_reduce_monitor_period",
                    value,
                    0,
                    "a period of 0..3600000000 microseconds",
                )?
            }
            "min_time_between_cnps" => {
                self.min_time_between_cnps = micros(
                    "min_time_between_cnps",
                    value,
                    0,
                    "a period of 0..3600000000 microseconds",
                )?
            }
            "cnp_dscp" => {
                self.cnp_dscp = Some(int("cnp_dscp", value, 0, 63, "a DSCP of 0..63")? as u8)
            }
            other => return Err(CcParamError::Unknown(other.to_string())),
        }
        Ok(())
    }

    /// Applies `NAME=VALUE` entries separated by commas (blank entries are skipped), then
    /// checks the parameters together; the configuration is unchanged on an error.
    pub fn apply_params(&mut self, list: &str) -> Result<(), CcParamError> {
        let mut next = *self;
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, value) = entry
                .split_once('=')
                .ok_or_else(|| CcParamError::Syntax(entry.to_string()))?;
            next.set_param(name, value)?;
        }
        next.check()?;
        *self = next;
        Ok(())
    }

    /// Checks what no single parameter can: the rate floor lies below the line rate.
    pub fn check(&self) -> Result<(), CcParamError> {
        if self.rp.rpg_min_rate_mbps > self.rp.max_rate_mbps {
            return Err(CcParamError::MinAboveMax {
                min: self.rp.rpg_min_rate_mbps,
                max: self.rp.max_rate_mbps,
            });
        }
        Ok(())
    }

    /// The configuration a mode (`dcqcn`/`none`) and a parameter list give: the defaults with
    /// the parameters applied. Parameters without `dcqcn` are refused rather than ignored.
    pub fn from_text(mode: &str, params: &str) -> Result<CcConfig, CcParamError> {
        let mut cfg = CcConfig {
            enabled: parse_mode(mode)?,
            ..CcConfig::default()
        };
        if !cfg.enabled && params.split(',').any(|e| !e.trim().is_empty()) {
            return Err(CcParamError::ParamsWithoutCc);
        }
        cfg.apply_params(params)?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_parameter_is_settable_and_lands_in_its_field() {
        let mut c = CcConfig::on();
        c.apply_params(
            "rpg_max_rate=2000, rpg_time_reset=300,rpg_byte_reset=32767,rpg_threshold=7,\
             rpg_ai_rate=5,rpg_hai_rate=50,rpg_min_dec_fac=20,rpg_min_rate=10,dce_tcp_g=1019,\
             dce_tcp_rtt=1,initial_alpha_value=512,rate_reduce_monitor_period=0,\
             min_time_between_cnps=4,cnp_dscp=48",
        )
        .unwrap();
        let us = Duration::from_micros;
        let p = c.rp;
        assert_eq!(p.max_rate_mbps, 2000.0);
        assert_eq!(p.rpg_time_reset, us(300));
        assert_eq!(p.rpg_byte_reset, 32767);
        assert_eq!(p.rpg_threshold, 7);
        assert_eq!((p.rpg_ai_rate_mbps, p.rpg_hai_rate_mbps), (5.0, 50.0));
        assert_eq!((p.rpg_min_dec_fac, p.rpg_min_rate_mbps), (20, 10.0));
        assert_eq!((p.dce_tcp_g, p.dce_tcp_rtt), (1019, us(1)));
        assert_eq!(p.initial_alpha_value, 512);
        assert_eq!(p.rate_reduce_monitor_period, Duration::ZERO);
        assert_eq!(c.min_time_between_cnps, us(4));
        assert_eq!(c.cnp_dscp, Some(48));
        assert!(c.enabled);
        // Every name the list advertises is accepted by set_param (no stale entry).
        for name in PARAM_NAMES {
            let mut c = CcConfig::on();
            assert!(
                !matches!(c.set_param(name, "1"), Err(CcParamError::Unknown(_))),
                "{name}"
            );
        }
    }

    #[test]
    fn bad_entries_are_refused_by_name_and_leave_the_config_alone() {
        let before = CcConfig::on();
        for (list, want) in [
            (
                "rpg_ai_rat=5",
                "unknown congestion control parameter 'rpg_ai_rat'",
            ),
            ("rpg_ai_rate", "'rpg_ai_rate': not NAME=VALUE"),
            (
                "rpg_ai_rate=-1",
                "rpg_ai_rate=-1: rpg_ai_rate must be a rate in Mb/s",
            ),
            ("rpg_ai_rate=nan", "rpg_ai_rate must be"),
            (
                "rpg_threshold=0",
                "rpg_threshold must be a stage count of 1..31",
            ),
            ("dce_tcp_g=1024", "dce_tcp_g must be 0..1023"),
            ("rpg_time_reset=0", "rpg_time_reset must be a period of 1.."),
            ("cnp_dscp=64", "cnp_dscp must be a DSCP of 0..63"),
            ("rpg_min_dec_fac=0", "rpg_min_dec_fac must be a percentage"),
            (
                "rpg_max_rate=0",
                "rpg_max_rate must be a rate in Mb/s above 0",
            ),
            // Valid one by one, not together; the first entry must not stick either.
            (
                "rpg_min_rate=500,rpg_max_rate=100",
                "rpg_min_rate 500 Mb/s is above rpg_max_rate 100 Mb/s",
            ),
        ] {
            let mut c = before;
            let e = c.apply_params(list).unwrap_err().to_string();
            assert!(e.contains(want), "{list}: {e}");
            assert_eq!(c, before, "{list}");
        }
    }

    #[test]
    fn the_mode_is_dcqcn_or_none() {
        assert!(CcConfig::from_text("dcqcn", "").unwrap().enabled);
        assert!(CcConfig::from_text(" DCQCN ", "").unwrap().enabled);
        assert_eq!(
            CcConfig::from_text("none", "").unwrap(),
            CcConfig::default()
        );
        assert_eq!(
            CcConfig::from_text("cubic", "").unwrap_err().to_string(),
            "congestion control 'cubic': must be dcqcn or none"
        );
        assert_eq!(
            CcConfig::from_text("none", "rpg_ai_rate=5"),
            Err(CcParamError::ParamsWithoutCc)
        );
        assert_eq!(
            CcConfig::from_text("dcqcn", "rpg_ai_rate=5")
                .unwrap()
                .rp
                .rpg_ai_rate_mbps,
            5.0
        );
    }
}
