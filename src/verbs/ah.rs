//! Address handles (`ibv_ah`).
//!
//! An address handle names where UD datagrams go: the destination GID (its IP address on
//! RoCEv2), hop limit and traffic class. The UDP source port is not the handle's: as in rxe,
//! every packet of a UD QP leaves from the QP's port (`0xC000 | hash_32(qpn, 14)`).

use std::net::IpAddr;

use crate::driver::device::Device;
use crate::ib::{AhAttr, Result, VerbsError};

/// An address handle (`ibv_create_ah`).
#[derive(Debug, Clone)]
pub struct AddressHandle {
    pub(crate) pd: u32,
    pub(crate) attr: AhAttr,
}

impl AddressHandle {
    /// Checks `attr` against the device as rxe_av_chk_attr does: a GID index in the table and
    /// a destination of the device's address family.
    pub(crate) fn new(dev: &Device, pd: u32, attr: &AhAttr) -> Result<AddressHandle> {
        if attr.sgid_index as usize >= dev.limits.gid_table_len as usize {
            return Err(VerbsError::InvalidAttribute {
                attr: "sgid_index",
                reason: "outside the GID table",
            });
        }
        let dst = attr.dgid.to_ip();
        if dst.is_ipv4() != dev.local.is_ipv4() || attr.dgid.is_zero() {
            return Err(VerbsError::InvalidAttribute {
                attr: "dgid",
                reason: "not an address of the device's IP family",
            });
        }
        Ok(AddressHandle { pd, attr: *attr })
    }

    /// The attributes (`ibv_query_ah`).
    pub fn attr(&self) -> AhAttr {
        self.attr
    }

    /// The destination IP address.
    pub fn dest_ip(&self) -> IpAddr {
        self.attr.dgid.to_ip()
    }
}
