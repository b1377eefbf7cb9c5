//! perftest flags that describe hardware or setups a user-space RoCE device does not have
//! (dual port, DC, AES-XTS, ODP, hugepages, mmap'd or GPU memory, multicast, raw
//! Ethernet, SRQ, events). They parse, so that an ib_*_bw command line pasted as is gets an
//! answer naming the flag instead of "unexpected argument", and [`RefusedFlags::check`] refuses
//! each by name.

use clap::Args;

use crate::cli::CliError;

/// The refused flags, with perftest's spellings.
#[derive(Debug, Clone, Default, Args)]
pub struct RefusedFlags {
    /// Refused: a softroce device has one port.
    #[arg(short = 'O', long = "dualport", hide = true)]
    dualport: bool,
    /// Refused: no on-demand paging (memory is always registered).
    #[arg(long = "odp", hide = true)]
    odp: bool,
    /// Refused: buffers are ordinary heap memory.
    #[arg(long = "use_hugepages", hide = true)]
    use_hugepages: bool,
    /// Refused: buffers are ordinary heap memory.
    #[arg(long = "mmap", hide = true)]
    mmap: Option<String>,
    /// Refused with --mmap.
    #[arg(long = "mmap-offset", hide = true)]
    mmap_offset: Option<String>,
    /// Refused: no GPU memory.
    #[arg(long = "use_cuda", hide = true)]
    use_cuda: Option<String>,
    /// Refused: no GPU memory.
    #[arg(long = "use_rocm", hide = true)]
    use_rocm: Option<String>,
    /// Refused: no AES-XTS crypto offload.
    #[arg(long = "aes_xts", hide = true)]
    aes_xts: bool,
    /// Refused: no crypto offload.
    #[arg(long = "encrypt_on_tx", hide = true)]
    encrypt_on_tx: bool,
    /// Refused: no signature offload.
    #[arg(long = "sig_before", hide = true)]
    sig_before: bool,
    /// Refused: no crypto offload.
    #[arg(long = "aes_block_size", hide = true)]
    aes_block_size: Option<String>,
    /// Refused: no crypto offload.
    #[arg(long = "kek_path", hide = true)]
    kek_path: Option<String>,
    /// Refused: no crypto offload.
    #[arg(long = "credentials_path", hide = true)]
    credentials_path: Option<String>,
    /// Refused: no crypto offload.
    #[arg(long = "data_enc_keys_number", hide = true)]
    data_enc_keys_number: Option<String>,
    /// Refused: no DC transport.
    #[arg(long = "log_dci_streams", hide = true)]
    log_dci_streams: Option<String>,
    /// Refused: no DC transport.
    #[arg(long = "log_active_dci_streams", hide = true)]
    log_active_dci_streams: Option<String>,
    /// Refused: multicast is UD-only in perftest and not offered here.
    #[arg(short = 'g', long = "mcg", hide = true)]
    mcg: bool,
    /// Refused with --mcg.
    #[arg(short = 'M', long = "MGID", hide = true)]
    mgid: Option<String>,
    /// Refused: no raw Ethernet QPs.
    #[arg(long = "raw_mcast", hide = true)]
    raw_mcast: bool,
    /// Refused: no raw Ethernet QPs.
    #[arg(short = 'v', long = "mac_fwd", hide = true)]
    mac_fwd: bool,
    /// Refused: no raw Ethernet QPs.
    #[arg(short = 'G', long = "use_rss", hide = true)]
    use_rss: bool,
    /// Refused: the perf programs poll their CQ.
    #[arg(short = 'e', long = "events", hide = true)]
    events: bool,
    /// Refused: the perf programs use one receive queue per QP.
    #[arg(long = "use-srq", hide = true)]
    use_srq: bool,
}

impl RefusedFlags {
    /// Fails naming the first refused flag given.
    pub fn check(&self) -> Result<(), CliError> {
        let given = [
            (
                self.dualport,
                "-O/--dualport: a softroce device has one port",
            ),
            (
                self.odp,
                "--odp: softroce registers memory up front; there is no on-demand paging",
            ),
            (
                self.use_hugepages,
                "--use_hugepages: softroce buffers are ordinary heap memory",
            ),
            (
                self.mmap.is_some(),
                "--mmap: softroce buffers are ordinary heap memory",
            ),
            (
                self.mmap_offset.is_some(),
                "--mmap-offset: softroce buffers are ordinary heap memory",
            ),
            (
                self.use_cuda.is_some(),
                "--use_cuda: softroce has no GPU memory",
            ),
            (
                self.use_rocm.is_some(),
                "--use_rocm: softroce has no GPU memory",
            ),
            (self.aes_xts, "--aes_xts: softroce has no crypto offload"),
            (
                self.encrypt_on_tx,
                "--encrypt_on_tx: softroce has no crypto offload",
            ),
            (
                self.sig_before,
                "--sig_before: softroce has no signature offload",
            ),
            (
                self.aes_block_size.is_some(),
                "--aes_block_size: softroce has no crypto offload",
            ),
            (
                self.kek_path.is_some(),
                "--kek_path: softroce has no crypto offload",
            ),
            (
                self.credentials_path.is_some(),
                "--credentials_path: softroce has no crypto offload",
            ),
            (
                self.data_enc_keys_number.is_some(),
                "--data_enc_keys_number: softroce has no crypto offload",
            ),
            (
                self.log_dci_streams.is_some(),
                "--log_dci_streams: softroce has no DC transport",
            ),
            (
                self.log_active_dci_streams.is_some(),
                "--log_active_dci_streams: softroce has no DC transport",
            ),
            (
                self.mcg,
                "-g/--mcg: perftest's multicast runs on UD; softroce perf runs RC",
            ),
            (
                self.mgid.is_some(),
                "-M/--MGID: perftest's multicast runs on UD; softroce perf runs RC",
            ),
            (
                self.raw_mcast,
                "--raw_mcast: softroce has no raw Ethernet QPs",
            ),
            (
                self.mac_fwd,
                "-v/--mac_fwd: softroce has no raw Ethernet QPs",
            ),
            (
                self.use_rss,
                "-G/--use_rss: softroce has no raw Ethernet QPs",
            ),
            (
                self.events,
                "-e/--events: softroce perf polls its completion queue",
            ),
            (
                self.use_srq,
                "--use-srq: softroce perf gives each QP its own receive queue",
            ),
        ];
        match given.iter().find(|(on, _)| *on) {
            Some((_, why)) => Err(CliError::Usage(format!(
                "{why}; this flag is not supported"
            ))),
            None => Ok(()),
        }
    }
}
