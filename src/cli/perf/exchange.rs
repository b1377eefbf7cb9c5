//! The out-of-band exchange before any QP exists: the TCP connection (rdma_cm's is in
//! `rdma_cm.rs`) and the agreement every perftest program starts with: versions (and between
//! softroce ends the test signature), system data and MTU.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use softroce::ib::Mtu;
use softroce::oob::perftest::{Exchange, Role};
use std::result::Result;

use super::params::Params;
use super::render::print_waiting;
use super::resources::{Agreed, Layout};
use super::PerfArgs;
use crate::cli::CliError;

/// Opens the out-of-band TCP connection: connects to SERVER, or listens and accepts one peer.
/// Returns the exchange and this end's device address.
pub(super) fn open_tcp(args: &PerfArgs, timeout: Duration) -> Result<(Exchange, IpAddr), CliError> {
    let server_addr = match &args.server {
        Some(h) => {
            use std::net::ToSocketAddrs;
            Some(
                (h.as_str(), args.port)
                    .to_socket_addrs()
                    .map_err(|e| CliError::Usage(format!("cannot resolve {h}: {e}")))?
                    .next()
                    .ok_or_else(|| CliError::Usage(format!("{h} has no address")))?,
            )
        }
        None => None,
    };
    let ip = args.device.local_ip(server_addr.map(|a| a.ip()))?;
    let (stream, role) = match server_addr {
        Some(addr) => (
            TcpStream::connect_timeout(&addr, timeout)
                .map_err(|e| CliError::Failed(format!("couldn't connect to {addr}: {e}")))?,
            Role::Client,
        ),
        None => {
            let l = TcpListener::bind(SocketAddr::new(ip, args.port)).map_err(|e| {
                CliError::Failed(format!("couldn't listen on port {}: {e}", args.port))
            })?;
            if args.full_report() {
                print_waiting()?;
            }
            (l.accept().map_err(CliError::Io)?.0, Role::Server)
        }
    };
    stream
        .set_read_timeout(Some(timeout))
        .map_err(CliError::Io)?;
    let _ = stream.set_nodelay(true);
    let x = Exchange::new(stream, role);
    Ok((x, ip))
}

/// Versions (and, between softroce ends, the test signature), system data and MTU: every
/// perftest program starts so.
pub(super) fn agree(x: &mut Exchange, p: &mut Params, args: &PerfArgs) -> Result<Agreed, CliError> {
    let peer = x.versions(Some(p.signature())).map_err(CliError::Oob)?;
    match peer.softroce {
        Some(theirs) if theirs != p.signature() => {
            return Err(CliError::Failed(format!(
                "the peer runs another test ({}); this end runs {}: give both ends the same test and flags",
                Params::describe(&theirs),
                Params::describe(&p.signature())
            )))
        }
        None if p.check => {
            return Err(CliError::Usage(format!(
                "--check needs softroce at both ends; the peer is perftest {} (its buffers hold random bytes)",
                peer.version
            )))
        }
        _ => {}
    }
    let (cycle, line) = x.sys_data(4096, 64).map_err(CliError::Oob)?;
    let mtu_bytes = x.mtu(args.mtu).map_err(CliError::Oob)?;
    let mtu = Mtu::from_bytes(mtu_bytes).expect("agreed MTUs are valid");
    p.fit_ud_size(args, mtu_bytes)?;
    let layout = if p.check {
        // Under UD each receive also holds the GRH room.
        Layout::check(p.size + p.grh_room(), p.iters)?
    } else {
        Layout::perftest(p.size, cycle as u64, line as u64)
    };
    Ok(Agreed {
        layout,
        mtu,
        mtu_bytes,
        cycle: cycle as u64,
        line: line as u64,
    })
}
